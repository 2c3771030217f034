/**
 * Turns what the runtime hands a CNI plugin — `CNI_*` environment variables and the netconf
 * JSON on stdin — into one request for coild. Pure: no I/O, so every error path is unit-tested.
 * The checks and their order follow the Go `skel` package that Coil's `coil` is built on.
 *
 * @see CNI spec SPEC.md "Parameters", "Error codes", "GC", "STATUS"
 * @see docs/compatibility.md#the-cni-executable (netconf `socket`, CNI_ARGS keys),
 *   docs/compatibility.md#the-cni-grpc-api (IS_CHAINED)
 */
import { utf8Text } from './bytes.js';
import type { Attachment, CniArgsMessage } from './cnirpc.js';
import { ErrorCode, PluginError } from './plugin-error.js';

/** CNI versions the shim accepts in netconf and can print results in. */
export const SUPPORTED_VERSIONS = ['0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
/** Where coild listens unless the netconf's `socket` says otherwise (Coil's default). */
export const DEFAULT_SOCKET = '/run/coild.sock';

/** CNI verbs that are forwarded to coild. */
export type CallCommand = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS';

/** A parsed invocation: VERSION is answered locally, the rest become one gRPC call. */
export type ShimRequest =
  | { command: 'VERSION' }
  | {
      command: CallCommand;
      /** The netconf's `cniVersion`: results and errors are printed in it. */
      cniVersion: string;
      /** coild's socket: netconf `socket`, default {@link DEFAULT_SOCKET}. */
      socketPath: string;
      /** The netconf's prevResult, when chained (printed back by ADD, as Coil does). */
      prevResult?: Record<string, unknown>;
      args: CniArgsMessage;
    };

/**
 * Environment variables each verb requires (skel's table; DEL may lack CNI_NETNS).
 *
 * A note for this file and the rest of src/cni-shim: the executable is a one-shot JavaScriptCore
 * process, where the first call of a builtin written in JavaScript costs tens of µs (measured in
 * the Bun executable: Array.prototype.map ≈ 120 µs, filter ≈ 80 µs, Object.hasOwn ≈ 20 µs, a
 * regular expression ≈ 60 µs), so plain loops stand in for them on the ADD path.
 */
const REQUIRED_ENV: Record<CallCommand, readonly string[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  DEL: ['CNI_CONTAINERID', 'CNI_IFNAME', 'CNI_PATH'],
  GC: ['CNI_PATH'],
  STATUS: ['CNI_PATH'],
};

const CALL_COMMANDS = new Set<string>(Object.keys(REQUIRED_ENV));

/** CNI_ARGS keys Coil knows; the K8S_* ones are forwarded to coild. */
const FORWARDED_ARGS = ['K8S_POD_NAMESPACE', 'K8S_POD_NAME', 'K8S_POD_INFRA_CONTAINER_ID', 'K8S_POD_UID'];
/** Set in `args` when the netconf has a prevResult (Coil's `constants.IsChained`). */
export const IS_CHAINED_KEY = 'IS_CHAINED';

/**
 * skel's ID pattern `^[a-zA-Z0-9][a-zA-Z0-9_.-]*$` (container IDs, network names), as a loop: a
 * regular expression is compiled on first use, which costs the one-shot executable ≈ 0.05 ms.
 */
function isId(s: string): boolean {
  if (s.length === 0) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const isAlnum = (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
    if (!isAlnum && (i === 0 || (c !== 95 && c !== 46 && c !== 45))) return false; // _ . -
  }
  return true;
}

/**
 * Parses one invocation.
 * @param env the process environment (only `CNI_*` are read).
 * @param stdin the bytes the runtime wrote to stdin (ignored by VERSION).
 * @throws PluginError 4 for a missing or invalid variable (command, container id, netns, ifname,
 *   CNI_ARGS), 6 when stdin is not a JSON object, 1 for an unsupported `cniVersion` (or GC/STATUS
 *   below 1.1.0), 7 for an invalid netconf (name, socket, prevResult, valid-attachments).
 */
export function parseRequest(env: Readonly<Record<string, string | undefined>>, stdin: Uint8Array): ShimRequest {
  const command = env.CNI_COMMAND ?? '';
  if (command === '') throw new PluginError(ErrorCode.INVALID_ENVIRONMENT_VARIABLES, 'required env variables [CNI_COMMAND] missing');
  if (command === 'VERSION') return { command };
  if (!CALL_COMMANDS.has(command)) throw new PluginError(ErrorCode.INVALID_ENVIRONMENT_VARIABLES, `unknown CNI_COMMAND: ${command}`);
  const cmd = command as CallCommand;
  const missing: string[] = [];
  for (const k of REQUIRED_ENV[cmd]) if ((env[k] ?? '') === '') missing.push(k);
  if (missing.length > 0) {
    throw new PluginError(ErrorCode.INVALID_ENVIRONMENT_VARIABLES, `required env variables [${missing.join(' ')}] missing`);
  }

  const conf = decodeNetConf(stdin);
  const cniVersion = conf.cniVersion;
  if (typeof cniVersion !== 'string' || cniVersion === '') throw new PluginError(ErrorCode.INVALID_NETWORK_CONFIG, 'netconf: cniVersion is required');
  if (!(SUPPORTED_VERSIONS as readonly string[]).includes(cniVersion)) {
    throw new PluginError(ErrorCode.INCOMPATIBLE_CNI_VERSION, 'incompatible CNI versions', `config is "${cniVersion}", plugin supports [${SUPPORTED_VERSIONS.join(' ')}]`);
  }
  if ((cmd === 'GC' || cmd === 'STATUS') && cniVersion !== '1.1.0') {
    throw new PluginError(ErrorCode.INCOMPATIBLE_CNI_VERSION, `config version does not allow ${cmd}`, cniVersion);
  }
  if (typeof conf.name !== 'string' || conf.name === '') throw new PluginError(ErrorCode.INVALID_NETWORK_CONFIG, 'missing network name');
  if (!isId(conf.name)) throw new PluginError(ErrorCode.INVALID_NETWORK_CONFIG, `invalid characters found in network name ${conf.name}`);

  const containerId = env.CNI_CONTAINERID ?? '';
  const ifname = env.CNI_IFNAME ?? '';
  if (cmd !== 'GC' && cmd !== 'STATUS') {
    if (!isId(containerId)) throw new PluginError(ErrorCode.INVALID_ENVIRONMENT_VARIABLES, 'invalid characters in containerID', containerId);
    validateIfname(ifname);
  }

  const socket = conf.socket ?? DEFAULT_SOCKET;
  if (typeof socket !== 'string' || socket === '') throw new PluginError(ErrorCode.INVALID_NETWORK_CONFIG, 'netconf: socket must be a non-empty string');

  const args = parseCniArgs(env.CNI_ARGS ?? '');
  const prev = parsePrevResult(conf.prevResult);
  if (prev) args[IS_CHAINED_KEY] = 'true';
  return {
    command: cmd,
    cniVersion,
    socketPath: socket,
    ...(prev ? { prevResult: prev.raw } : {}),
    args: {
      containerId,
      netns: env.CNI_NETNS ?? '',
      ifname,
      args,
      path: env.CNI_PATH ?? '',
      stdinData: stdin,
      ips: prev?.ips ?? [],
      interfaces: prev?.interfaces ?? {},
      validAttachments: cmd === 'GC' ? parseAttachments(conf['cni.dev/valid-attachments']) : [],
    },
  };
}

/**
 * The `cniVersion` to put in an error object: the netconf's if stdin is readable, else 1.1.0.
 * Never throws (it runs while reporting another error).
 */
export function peekCniVersion(stdin: Uint8Array): string {
  try {
    const v: unknown = (JSON.parse(utf8Text(stdin)) as { cniVersion?: unknown }).cniVersion;
    return typeof v === 'string' && v !== '' ? v : '1.1.0';
  } catch {
    return '1.1.0';
  }
}

/**
 * Parses CNI_ARGS (`K=V;K=V`) as Go's `types.LoadArgs` with Coil's `PluginEnvArgs`: unknown
 * keys are an error unless `IgnoreUnknown` is true.
 * @returns the K8S_* values present (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_INFRA_CONTAINER_ID, K8S_POD_UID).
 * @throws PluginError 4 for a pair without exactly one `=`, a bad IgnoreUnknown, or unknown keys.
 */
export function parseCniArgs(raw: string): Record<string, string> {
  const pairs = new Map<string, string>();
  for (const pair of raw.split(';')) {
    if (pair === '') continue;
    const kv = pair.split('=');
    if (kv.length !== 2) throw new PluginError(ErrorCode.INVALID_ENVIRONMENT_VARIABLES, `ARGS: invalid pair "${pair}"`);
    pairs.set(kv[0] as string, kv[1] as string);
  }
  let ignoreUnknown = false;
  const ignore = pairs.get('IgnoreUnknown');
  if (ignore !== undefined) {
    const v = ignore.toLowerCase();
    if (v !== '1' && v !== 'true' && v !== '0' && v !== 'false') {
      throw new PluginError(ErrorCode.INVALID_ENVIRONMENT_VARIABLES, `ARGS: boolean value "${ignore}" for IgnoreUnknown is invalid`);
    }
    ignoreUnknown = v === '1' || v === 'true';
  }
  const out: Record<string, string> = {};
  const unknown: string[] = [];
  for (const [k, v] of pairs) {
    if (FORWARDED_ARGS.includes(k)) out[k] = v;
    else if (k !== 'IgnoreUnknown') unknown.push(`${k}=${v}`);
  }
  if (unknown.length > 0 && !ignoreUnknown) {
    throw new PluginError(ErrorCode.INVALID_ENVIRONMENT_VARIABLES, `ARGS: unknown args [${unknown.join(' ')}]`);
  }
  return out;
}

/** The netconf as an object. @throws PluginError 6 when stdin is not a JSON object. */
function decodeNetConf(stdin: Uint8Array): Record<string, unknown> {
  let conf: unknown;
  try {
    conf = JSON.parse(utf8Text(stdin));
  } catch (err) {
    throw new PluginError(ErrorCode.DECODING_FAILURE, 'failed to decode network configuration from stdin', String(err), { cause: err });
  }
  if (typeof conf !== 'object' || conf === null || Array.isArray(conf)) {
    throw new PluginError(ErrorCode.DECODING_FAILURE, 'network configuration on stdin is not a JSON object');
  }
  return conf as Record<string, unknown>;
}

/** skel's `ValidateInterfaceName`: Linux's IFNAMSIZ-1 and characters the kernel rejects. */
function validateIfname(ifname: string): void {
  const bad = (why: string): PluginError => new PluginError(ErrorCode.INVALID_ENVIRONMENT_VARIABLES, why, ifname);
  if (ifname.length > 15) throw bad('interface name is too long');
  if (ifname === '.' || ifname === '..') throw bad('interface name is . or ..');
  // Names made of [a-zA-Z0-9_.-] (all real ones) skip compiling the regular expression.
  if (!isId(ifname) && /[/:\s]/.test(ifname)) throw bad('interface name contains / or : or whitespace characters');
}

/**
 * Reads prevResult (0.3.x or later shape) into Coil's `ips` (addresses without prefix) and
 * `interfaces` (name → has sandbox). @throws PluginError 7 when it has the wrong shape.
 */
function parsePrevResult(
  prev: unknown,
): { raw: Record<string, unknown>; ips: string[]; interfaces: Record<string, boolean> } | undefined {
  if (prev === undefined || prev === null) return undefined;
  const bad = (why: string): PluginError => new PluginError(ErrorCode.INVALID_NETWORK_CONFIG, `netconf: invalid prevResult: ${why}`);
  if (typeof prev !== 'object' || Array.isArray(prev)) throw bad('not an object');
  const raw = prev as Record<string, unknown>;
  const ips: string[] = [];
  for (const ip of listOf(raw.ips, 'ips', bad)) {
    const address = (ip as { address?: unknown }).address;
    if (typeof address !== 'string' || !address.includes('/')) throw bad('ips[].address must be a CIDR string');
    ips.push(address.slice(0, address.indexOf('/')));
  }
  const interfaces: Record<string, boolean> = {};
  for (const iface of listOf(raw.interfaces, 'interfaces', bad)) {
    const { name, sandbox } = iface as { name?: unknown; sandbox?: unknown };
    if (typeof name !== 'string') throw bad('interfaces[].name must be a string');
    interfaces[name] = typeof sandbox === 'string' && sandbox !== '';
  }
  return { raw, ips, interfaces };
}

/** CNI 1.1 `cni.dev/valid-attachments`. @throws PluginError 7 when malformed. */
function parseAttachments(value: unknown): Attachment[] {
  const bad = (why: string): PluginError => new PluginError(ErrorCode.INVALID_NETWORK_CONFIG, `netconf: invalid cni.dev/valid-attachments: ${why}`);
  return listOf(value, 'cni.dev/valid-attachments', bad).map((a) => {
    const { containerID, ifname } = a as { containerID?: unknown; ifname?: unknown };
    if (typeof containerID !== 'string' || typeof ifname !== 'string') throw bad('entries need string containerID and ifname');
    return { containerId: containerID, ifname };
  });
}

/** An optional JSON array of objects. */
function listOf(value: unknown, what: string, bad: (why: string) => PluginError): object[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw bad(`${what} must be an array`);
  for (const v of value) if (typeof v !== 'object' || v === null) throw bad(`${what} entries must be objects`);
  return value as object[];
}
