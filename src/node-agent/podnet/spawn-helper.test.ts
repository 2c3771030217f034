import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { IpRunner } from '../../netlink/iproute2/ip-runner.js';
import { SpawnHelper } from './spawn-helper.js';

describe('SpawnHelper', () => {
  it('runs processes in the helper with stdin, stdout, stderr and exit status, in parallel', async () => {
    const h = new SpawnHelper();
    try {
      const [cat, fail, missing] = await Promise.all([
        h.spawner(['cat'], 'line 1\nline 2\n', 5_000),
        h.spawner(['sh', '-c', 'echo oops >&2; exit 3'], '', 5_000),
        h.spawner(['/nonexistent/binary'], '', 5_000),
      ]);
      assert.deepEqual([cat.stdout, cat.exitCode], ['line 1\nline 2\n', 0]);
      assert.deepEqual([fail.stderr, fail.exitCode], ['oops\n', 3]);
      assert.equal(missing.spawnError?.code, 'ENOENT');
    } finally {
      h.stop();
    }
  });

  it('kills a process past its timeout', async () => {
    const h = new SpawnHelper();
    try {
      const r = await h.spawner(['sleep', '5'], '', 100);
      assert.equal(r.signal, 'SIGTERM');
    } finally {
      h.stop();
    }
  });

  it('a dead helper fails the calls in flight as EAGAIN and the next call starts a new one', async () => {
    const exits: (string | null)[] = [];
    const h = new SpawnHelper({ onExit: (_code, signal) => exits.push(signal) });
    try {
      await h.spawner(['true'], '', 5_000);
      const inFlight = h.spawner(['sleep', '5'], '', 10_000);
      await new Promise((r) => setTimeout(r, 50));
      process.kill(h.pid!, 'SIGKILL');
      assert.equal((await inFlight).spawnError?.code, 'EAGAIN');
      assert.deepEqual(exits, ['SIGKILL']);
      assert.equal((await h.spawner(['echo', 'again'], '', 5_000)).stdout, 'again\n');
    } finally {
      h.stop();
    }
  });

  it('takes its processes still running down with it when coild goes (its stdin closes)', async () => {
    // A crashed coild closes the helper's stdin as stop() does. Before, the helper exited and its
    // children ran on: an ip batch finishing after the next coild's recovery could leave a veth
    // that no allocation knows.
    const dir = await mkdtemp(join(tmpdir(), 'spawn-helper-'));
    const h = new SpawnHelper();
    try {
      const pidFile = join(dir, 'pid');
      void h.spawner(['sh', '-c', `echo $$ > ${pidFile}; exec sleep 30`], '', 60_000);
      let pid = 0;
      for (let i = 0; i < 500 && !pid; i++) {
        pid = Number((await readFile(pidFile, 'utf8').catch(() => '')).trim());
        if (!pid) await new Promise((r) => setTimeout(r, 10));
      }
      assert.ok(pid > 0, 'the process started');
      h.stop();
      const alive = (): boolean => {
        try {
          process.kill(pid, 0);
          // A zombie of an exited helper counts as gone (reaped by init soon).
          return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
        } catch {
          return false;
        }
      };
      for (let i = 0; i < 300 && alive(); i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(alive(), false, `process ${pid} outlived the helper`);
    } finally {
      h.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('serves as the IpRunner spawner', async () => {
    const h = new SpawnHelper();
    try {
      const ip = new IpRunner({ spawner: h.spawner });
      assert.match((await ip.exec([ip.ipPath, '-V'])).stdout, /iproute2/);
    } finally {
      h.stop();
    }
  });
});
