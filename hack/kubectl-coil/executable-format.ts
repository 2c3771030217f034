/**
 * What an executable file is for, read from its header as a loader would; whether a Mach-O's
 * embedded code signature holds; and an ad-hoc signature for a Mach-O whose signature does not.
 * build.ts checks (and where needed signs) each darwin output with these before it writes the
 * manifest; test/kubectl-coil-krew.test.ts makes the same checks on the archives (no macOS or
 * arm64 machine here to run them).
 *
 * ELF (the System V gABI): `\x7fELF`, class 2 (64-bit), data 1 (little-endian), `e_machine` 62
 * (x86-64) or 183 (AArch64), `e_type` 2 or 3 (an executable or a PIE). Mach-O (Apple's
 * <mach-o/loader.h>): magic 0xfeedfacf (64-bit), `cputype` 0x01000007 (x86_64) or 0x0100000c
 * (arm64), `filetype` 2 (MH_EXECUTE). The code signature (<kern/cs_blobs.h>, big-endian): the
 * LC_CODE_SIGNATURE load command points at a SuperBlob (0xfade0cc0) whose CodeDirectory (0xfade0c02)
 * holds one hash per page of the file up to `codeLimit`, the last page hashed as far as
 * `codeLimit` (what the kernel checks page by page at run time); special slots hash the other
 * blobs of the SuperBlob. macOS on arm64 kills an executable whose signature is missing or wrong.
 *
 * Bun's `--compile` replaces the runtime's signature with an ad-hoc one for darwin/arm64 (Bun's
 * MachoSigner); for darwin/x64 (1.4.5, cross-compiled) it leaves the runtime's original Developer
 * ID signature, which no longer matches the changed file (a page hash of the first page and of
 * the moved segments, and a codeLimit short of the new end). {@link adhocSign} writes what Bun
 * writes for arm64: a SuperBlob holding one CodeDirectory (version 0x20400, flags adhoc |
 * linker-signed, no special slots, the executable segment copied from the old one).
 */
import { createHash } from 'node:crypto';

/** The platform an executable is built for, in krew's (Go's) words. */
export interface ExecutableFormat {
  readonly format: 'elf' | 'macho';
  readonly os: 'linux' | 'darwin';
  readonly arch: 'amd64' | 'arm64';
}

const ELF_MACHINES: Record<number, ExecutableFormat['arch']> = { 62: 'amd64', 183: 'arm64' };
const MACHO_CPUS: Record<number, ExecutableFormat['arch']> = { 0x01000007: 'amd64', 0x0100000c: 'arm64' };

/**
 * @throws Error saying what is wrong when `file` is no 64-bit little-endian ELF or Mach-O
 *   executable of a known machine
 */
export function executableFormat(file: Buffer): ExecutableFormat {
  if (file.subarray(0, 4).equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) {
    if (file[4] !== 2 || file[5] !== 1) throw new Error(`ELF class ${file[4]} data ${file[5]}: not 64-bit little-endian`);
    const type = file.readUInt16LE(16);
    if (type !== 2 && type !== 3) throw new Error(`ELF e_type ${type}: not an executable`);
    const arch = ELF_MACHINES[file.readUInt16LE(18)];
    if (!arch) throw new Error(`ELF e_machine ${file.readUInt16LE(18)}: neither x86-64 nor AArch64`);
    return { format: 'elf', os: 'linux', arch };
  }
  if (file.readUInt32LE(0) === 0xfeedfacf) {
    const arch = MACHO_CPUS[file.readUInt32LE(4)];
    if (!arch) throw new Error(`Mach-O cputype 0x${file.readUInt32LE(4).toString(16)}: neither x86_64 nor arm64`);
    if (file.readUInt32LE(12) !== 2) throw new Error(`Mach-O filetype ${file.readUInt32LE(12)}: not MH_EXECUTE`);
    return { format: 'macho', os: 'darwin', arch };
  }
  throw new Error(`neither ELF nor 64-bit Mach-O (magic ${file.subarray(0, 4).toString('hex')})`);
}

/** What {@link machoSignature} found. */
export interface MachoSignature {
  /** CodeDirectory flags; 0x2 is CS_ADHOC. */
  readonly flags: number;
  readonly adhoc: boolean;
  readonly identifier: string;
  readonly codeLimit: number;
  readonly pages: number;
  /** Where the signature starts and ends in the file. */
  readonly offset: number;
  readonly end: number;
}

const LC_CODE_SIGNATURE = 0x1d;
const HASHES: Record<number, string> = { 1: 'sha1', 2: 'sha256' };

/**
 * Reads a 64-bit Mach-O's embedded signature and checks every hash its CodeDirectory holds:
 * each page up to `codeLimit`, and each special slot whose blob the SuperBlob holds.
 * @throws Error naming the first mismatch, or when the file has no signature
 */
export function machoSignature(file: Buffer): MachoSignature {
  const sig = signatureSpace(file);
  const sb = file.subarray(sig.off, sig.off + sig.size);
  if (sb.readUInt32BE(0) !== 0xfade0cc0) throw new Error(`signature: no SuperBlob (magic 0x${sb.readUInt32BE(0).toString(16)})`);
  const blobs = new Map<number, Buffer>();
  for (let i = 0; i < sb.readUInt32BE(8); i++) {
    const type = sb.readUInt32BE(12 + i * 8);
    const off = sb.readUInt32BE(16 + i * 8);
    blobs.set(type, sb.subarray(off, off + sb.readUInt32BE(off + 4)));
  }
  const cd = blobs.get(0);
  if (!cd || cd.readUInt32BE(0) !== 0xfade0c02) throw new Error('signature: no CodeDirectory');
  const flags = cd.readUInt32BE(12);
  const hashOffset = cd.readUInt32BE(16);
  const identOffset = cd.readUInt32BE(20);
  const nSpecial = cd.readUInt32BE(24);
  const nCode = cd.readUInt32BE(28);
  const codeLimit = cd.readUInt32BE(32);
  const hashSize = cd[36]!;
  const algorithm = HASHES[cd[37]!];
  const pageSize = 2 ** cd[39]!;
  if (!algorithm) throw new Error(`CodeDirectory hash type ${cd[37]}`);
  const digest = (b: Buffer): Buffer => createHash(algorithm).update(b).digest().subarray(0, hashSize);
  if (codeLimit !== sig.off) throw new Error(`codeLimit ${codeLimit} is not where the signature starts (${sig.off}): ${sig.off - codeLimit} bytes unsigned`);
  if (nCode !== Math.ceil(codeLimit / pageSize)) throw new Error(`${nCode} page hashes for a codeLimit of ${codeLimit} in ${pageSize}-byte pages`);
  for (let i = 0; i < nCode; i++) {
    const page = file.subarray(i * pageSize, Math.min((i + 1) * pageSize, codeLimit));
    const want = cd.subarray(hashOffset + i * hashSize, hashOffset + (i + 1) * hashSize);
    if (!digest(page).equals(want)) throw new Error(`page ${i} of ${nCode} (offset ${i * pageSize}) does not match its hash`);
  }
  for (const [type, blob] of blobs) {
    if (type === 0 || type >= 0x1000 || type > nSpecial) continue;
    const want = cd.subarray(hashOffset - type * hashSize, hashOffset - (type - 1) * hashSize);
    if (!digest(blob).equals(want)) throw new Error(`special slot ${type} does not match its blob`);
  }
  const identifier = cd.subarray(identOffset, cd.indexOf(0, identOffset)).toString();
  return { flags, adhoc: (flags & 0x2) !== 0, identifier, codeLimit, pages: nCode, offset: sig.off, end: sig.off + sig.size };
}

/** Where the LC_CODE_SIGNATURE load command points. @throws Error when there is none */
function signatureSpace(file: Buffer): { off: number; size: number } {
  const ncmds = file.readUInt32LE(16);
  let at = 32;
  for (let i = 0; i < ncmds; i++) {
    if (file.readUInt32LE(at) === LC_CODE_SIGNATURE) return { off: file.readUInt32LE(at + 8), size: file.readUInt32LE(at + 12) };
    at += file.readUInt32LE(at + 4);
  }
  throw new Error('no LC_CODE_SIGNATURE: no space for a signature');
}

/** CS_ADHOC | CS_LINKER_SIGNED */
const ADHOC_FLAGS = 0x20002;
/** The CodeDirectory's header up to and with the executable segment (version 0x20400). */
const CD_HEADER = 88;

/**
 * Replaces `file`'s code signature, in place, with an ad-hoc one over every byte before it:
 * SHA-256 page hashes of 4096-byte pages up to where the signature starts. The signature's
 * space (LC_CODE_SIGNATURE's size) is kept; what the new one does not fill is zeroed.
 * @returns the signed file (the same Buffer)
 * @throws Error when the file has no signature space, or the new signature does not fit in it
 */
export function adhocSign(file: Buffer, identifier: string): Buffer {
  const space = signatureSpace(file);
  const old = file.subarray(space.off, space.off + space.size);
  // The executable segment (base, limit, flags), from the old CodeDirectory when it has one.
  let execSeg = [0n, 0n, 0n];
  if (old.readUInt32BE(0) === 0xfade0cc0 && old.readUInt32BE(8) > 0) {
    const cd = old.subarray(old.readUInt32BE(16));
    if (cd.readUInt32BE(0) === 0xfade0c02 && cd.readUInt32BE(8) >= 0x20400) execSeg = [cd.readBigUInt64BE(64), cd.readBigUInt64BE(72), cd.readBigUInt64BE(80)];
  }
  const codeLimit = space.off;
  const pageSize = 4096;
  const nCode = Math.ceil(codeLimit / pageSize);
  const ident = Buffer.from(`${identifier}\0`);
  const hashOffset = CD_HEADER + ident.length;
  const cdLength = hashOffset + nCode * 32;
  const total = 20 + cdLength;
  if (total > space.size) throw new Error(`an ad-hoc signature of ${total} bytes does not fit in the ${space.size} bytes LC_CODE_SIGNATURE has`);
  const sb = Buffer.alloc(space.size);
  sb.writeUInt32BE(0xfade0cc0, 0);
  sb.writeUInt32BE(total, 4);
  sb.writeUInt32BE(1, 8);
  sb.writeUInt32BE(0, 12); // CSSLOT_CODEDIRECTORY
  sb.writeUInt32BE(20, 16);
  const cd = sb.subarray(20, 20 + cdLength);
  cd.writeUInt32BE(0xfade0c02, 0);
  cd.writeUInt32BE(cdLength, 4);
  cd.writeUInt32BE(0x20400, 8);
  cd.writeUInt32BE(ADHOC_FLAGS, 12);
  cd.writeUInt32BE(hashOffset, 16);
  cd.writeUInt32BE(CD_HEADER, 20);
  cd.writeUInt32BE(0, 24); // no special slots
  cd.writeUInt32BE(nCode, 28);
  cd.writeUInt32BE(codeLimit, 32);
  cd[36] = 32; // hashSize
  cd[37] = 2; // SHA-256
  cd[38] = 0; // platform
  cd[39] = 12; // log2(pageSize)
  // spare2, scatterOffset, teamOffset, spare3, codeLimit64: 0 (Buffer.alloc)
  cd.writeBigUInt64BE(execSeg[0]!, 64);
  cd.writeBigUInt64BE(execSeg[1]!, 72);
  cd.writeBigUInt64BE(execSeg[2]!, 80);
  ident.copy(cd, CD_HEADER);
  for (let i = 0; i < nCode; i++) {
    createHash('sha256').update(file.subarray(i * pageSize, Math.min((i + 1) * pageSize, codeLimit))).digest().copy(cd, hashOffset + i * 32);
  }
  sb.copy(file, space.off);
  return file;
}
