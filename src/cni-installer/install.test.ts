import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm, stat, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { install, InstallError, validateConflist } from './install.js';

const run = promisify(execFile);
const NETCONF = JSON.stringify({ cniVersion: '1.1.0', name: 'k8s-pod-network', plugins: [{ type: 'coil' }, { type: 'portmap', capabilities: { portMappings: true } }] });

describe('coil-install-cni', () => {
  let dir: string;
  let coilPath: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'coil-install-'));
    coilPath = join(dir, 'coil-src');
    await writeFile(coilPath, '#!/bin/sh\necho coil\n');
  });
  after(() => rm(dir, { recursive: true, force: true }));

  test('installs the executable (0755) and the conflist (0644)', async () => {
    const binDir = join(dir, 'a/bin');
    const confDir = join(dir, 'a/net.d');
    await install({ binDir, confDir, confName: '10-coil.conflist', coilPath, netconf: NETCONF });
    assert.equal((await stat(join(binDir, 'coil'))).mode & 0o777, 0o755);
    assert.equal((await stat(join(confDir, '10-coil.conflist'))).mode & 0o777, 0o644);
    assert.deepEqual(JSON.parse(await readFile(join(confDir, '10-coil.conflist'), 'utf8')), JSON.parse(NETCONF));
  });

  test("leaves none of the installed executable's pages in the page cache (they would be charged to coild's pod)", async () => {
    // A file of 4 MiB on a disk file system (fincore: resident pages of a file).
    const big = join(dir, 'coil-big');
    await writeFile(big, Buffer.alloc(4 << 20, 7));
    const binDir = join(dir, 'cache/bin');
    await install({ binDir, confDir: join(dir, 'cache/net.d'), confName: '10-coil.conflist', coilPath: big, netconf: NETCONF });
    const resident = (await run('fincore', ['--bytes', '--noheadings', '--output', 'RES', join(binDir, 'coil')])).stdout.trim();
    assert.equal(resident, '0', `resident bytes of the installed coil: ${resident}`);
    assert.deepEqual(await readFile(join(binDir, 'coil')), await readFile(big));
  });

  test("never deletes or changes other CNIs' files (Coil deletes every *conflist*)", async () => {
    const confDir = join(dir, 'b/net.d');
    await mkdir(confDir, { recursive: true });
    await writeFile(join(confDir, '05-cilium.conflist'), '{"other":true}');
    await writeFile(join(confDir, '10-coil.conflist.bak'), 'backup');
    await install({ binDir: join(dir, 'b/bin'), confDir, confName: '10-coil.conflist', coilPath, netconf: NETCONF });
    assert.deepEqual((await readdir(confDir)).sort(), ['05-cilium.conflist', '10-coil.conflist', '10-coil.conflist.bak']);
    assert.equal(await readFile(join(confDir, '05-cilium.conflist'), 'utf8'), '{"other":true}');
  });

  test('replaces an existing coil executable and leaves no temporary file', async () => {
    const binDir = join(dir, 'c/bin');
    await mkdir(binDir, { recursive: true });
    await writeFile(join(binDir, 'coil'), 'old');
    await install({ binDir, confDir: join(dir, 'c/net.d'), confName: '10-coil.conflist', coilPath, netconf: NETCONF });
    assert.equal(await readFile(join(binDir, 'coil'), 'utf8'), '#!/bin/sh\necho coil\n');
    assert.deepEqual(await readdir(binDir), ['coil']);
  });

  test('rejects a conflist without a coil plugin, and writes nothing', async () => {
    const confDir = join(dir, 'd/net.d');
    const bad = JSON.stringify({ cniVersion: '1.1.0', name: 'x', plugins: [{ type: 'bridge' }] });
    await assert.rejects(install({ binDir: join(dir, 'd/bin'), confDir, confName: '10-coil.conflist', coilPath, netconf: bad }), /no plugin of type "coil"/);
    await assert.rejects(stat(confDir), 'nothing was created');
  });

  test('validateConflist names the problem', () => {
    assert.throws(() => validateConflist('{'), (e: unknown) => e instanceof InstallError && /not JSON/.test(e.message));
    assert.throws(() => validateConflist('{"cniVersion":"1.1.0","name":"n","plugins":[]}'), /plugins must be a non-empty list/);
    assert.throws(() => validateConflist('{"name":"n","plugins":[{"type":"coil"}]}'), /cniVersion must be a string/);
  });

  test('the program reads Coil installer environment variables and exits 1 on bad input', async () => {
    const main = fileURLToPath(new URL('./main.js', import.meta.url));
    const env = { PATH: process.env.PATH, CNI_BIN_DIR: join(dir, 'e/bin'), CNI_ETC_DIR: join(dir, 'e/net.d'), COIL_PATH: coilPath, CNI_NETCONF: NETCONF };
    const { stdout } = await run(process.execPath, [main], { env });
    assert.match(stdout, /installed .*e\/bin\/coil and .*e\/net\.d\/10-coil\.conflist/);
    await assert.rejects(run(process.execPath, [main], { env: { ...env, CNI_NETCONF: '' } }), (e: { code: number; stderr: string }) => e.code === 1 && /set CNI_NETCONF/.test(e.stderr));
  });
});
