/**
 * Security checks in the stand-in lab (hack/lab/stand-in-lab.ts; issue 8): coild's socket is private, the webhook server speaks
 * only TLS ≥ 1.2, each ServiceAccount the chart creates can do what its program needs and
 * nothing else (checked by impersonation against the real apiserver), and no token or private
 * key appears in any program's log.
 */
import assert from 'node:assert/strict';
import { readFile, readdir, stat } from 'node:fs/promises';
import { connect } from 'node:tls';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { canI } from '../../hack/lab/credentials.js';
import { LAB_DIR, StandInLab as Lab } from '../../hack/lab/stand-in-lab.js';
import { kubectl } from '../envtest/tools.js';
import { prerequisite } from '../support/prerequisite.js';

const isRoot = process.getuid?.() === 0;

/** What each program must be able to do, and a sample of what it must not (verb, resource). */
const MATRIX: Record<string, { allowed: [string, string][]; forbidden: [string, string][] }> = {
  'coil-controller': {
    allowed: [
      ['create', 'addressblocks.coil.cybozu.com'], ['delete', 'addressblocks.coil.cybozu.com'],
      ['update', 'blockrequests.coil.cybozu.com/status'], ['update', 'addresspools.coil.cybozu.com'],
      ['list', 'nodes'], ['create', 'events'], ['update', 'leases.coordination.k8s.io'],
    ],
    forbidden: [
      ['get', 'secrets'], ['list', 'secrets'], ['create', 'pods'], ['delete', 'nodes'], ['update', 'nodes'],
      ['create', 'clusterroles.rbac.authorization.k8s.io'], ['create', 'serviceaccounts/token'],
      ['create', 'blockrequests.coil.cybozu.com'], ['delete', 'customresourcedefinitions.apiextensions.k8s.io'],
    ],
  },
  coild: {
    allowed: [
      ['create', 'blockrequests.coil.cybozu.com'], ['watch', 'addressblocks.coil.cybozu.com'],
      ['patch', 'addressblocks.coil.cybozu.com'], ['delete', 'addressblocks.coil.cybozu.com'],
      ['get', 'pods'], ['get', 'namespaces'], ['get', 'nodes'],
    ],
    forbidden: [
      // coild takes its finalizer off a block it releases with a JSON patch (BlockReleaser), so
      // its generated role (src/node-agent/rbac.ts) grants patch, not update.
      ['update', 'addressblocks.coil.cybozu.com'],
      ['create', 'addressblocks.coil.cybozu.com'], ['update', 'blockrequests.coil.cybozu.com/status'],
      ['delete', 'addresspools.coil.cybozu.com'], ['create', 'addresspools.coil.cybozu.com'],
      ['get', 'secrets'], ['create', 'pods'], ['delete', 'pods'], ['update', 'nodes'], ['delete', 'nodes'],
      ['update', 'leases.coordination.k8s.io'], ['create', 'serviceaccounts/token'],
    ],
  },
};

describe('security checks (e2e)', { skip: prerequisite(isRoot ? undefined : 'the lab needs root (network namespaces)') }, () => {
  let lab: Lab;

  before(async () => {
    lab = await Lab.up({ nodes: 2 });
    await lab.addPod(lab.nodes[0]!, 'a');
    await lab.addPod(lab.nodes[1]!, 'b');
    // Some failing traffic too, so error paths have logged.
    await kubectl(lab.cp.kubeconfigPath, ['apply', '-f', '-'], JSON.stringify({
      apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: 'narrow' }, spec: { blockSizeBits: 5, subnets: [{ ipv4: '10.99.0.0/30' }] },
    })).catch(() => undefined);
    await lab.deletePod('b');
  });
  after(() => lab?.stop());

  test("coild's gRPC socket is a socket owned by root with mode 0600", async () => {
    for (const node of lab.nodes) {
      const s = await stat(join(LAB_DIR, node.name, 'coild.sock'));
      assert.ok(s.isSocket(), 'a socket');
      assert.equal(s.mode & 0o777, 0o600, `${node.name} socket mode ${(s.mode & 0o777).toString(8)}`);
      assert.equal(s.uid, 0);
    }
  });

  test('the webhook server refuses plain HTTP and TLS below 1.2', async () => {
    const port = lab.controllerPorts[0]!.webhook;
    await assert.rejects(fetch(`http://127.0.0.1:${port}/validate-coil-cybozu-com-v2-addresspool`, { method: 'POST', body: '{}' }), 'plain HTTP fails');
    const tls11 = await new Promise<string>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, minVersion: 'TLSv1', maxVersion: 'TLSv1.1' });
      socket.on('secureConnect', () => { resolve(`connected ${socket.getProtocol()}`); socket.destroy(); });
      socket.on('error', (e) => resolve(`refused: ${e.message}`));
    });
    assert.match(tls11, /^refused/, tls11);
    const tls12 = await new Promise<string>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, minVersion: 'TLSv1.2' });
      socket.on('secureConnect', () => { resolve(socket.getProtocol() ?? ''); socket.destroy(); });
      socket.on('error', (e) => resolve(`error ${e.message}`));
    });
    assert.match(tls12, /^TLSv1\.[23]$/);
  });

  for (const [account, { allowed, forbidden }] of Object.entries(MATRIX)) {
    test(`${account} can do what it needs`, async () => {
      for (const [verb, resource] of allowed) assert.equal(await canI(lab.cp, account, verb, resource), true, `${account} ${verb} ${resource}`);
    });
    test(`${account} cannot do what it does not need`, async () => {
      for (const [verb, resource] of forbidden) assert.equal(await canI(lab.cp, account, verb, resource), false, `${account} must not ${verb} ${resource}`);
    });
  }

  test('no token or private key appears in any log', async () => {
    const secrets: string[] = [];
    for (const file of ['coil-controller.kubeconfig', 'coild.kubeconfig']) {
      const config = JSON.parse(await readFile(join(LAB_DIR, file), 'utf8')) as { users: { user: { token: string } }[] };
      secrets.push(config.users[0]!.user.token);
    }
    const key = await readFile(join(LAB_DIR, 'certs/tls.key'), 'utf8');
    secrets.push(key.split('\n')[1]!);
    const logs: string[] = [];
    const walk = async (dir: string) => {
      for (const e of await readdir(dir, { withFileTypes: true })) {
        if (e.isDirectory()) await walk(join(dir, e.name));
        else if (e.name.endsWith('.log')) logs.push(join(dir, e.name));
      }
    };
    await walk(LAB_DIR);
    assert.ok(logs.length >= 5, `found the logs (${logs.length})`);
    for (const log of logs) {
      const text = await readFile(log, 'utf8');
      for (const secret of secrets) assert.ok(!text.includes(secret), `${log} leaks a secret`);
      assert.doesNotMatch(text, /BEGIN [A-Z ]*PRIVATE KEY|Bearer [A-Za-z0-9._-]{20,}/, `${log} has key or bearer material`);
    }
  });
});
