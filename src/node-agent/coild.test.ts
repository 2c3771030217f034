import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { silentLogger } from '../runtime/logging.js';
import { Coild } from './coild.js';
import { parseConfig } from './config.js';

function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  return kc;
}

/** A coild built, never started (no API server, no host changes). */
function coild(...flags: string[]): Coild {
  return new Coild({ config: parseConfig(['--spawn-helper=false', '--netlink-agent=false', '--metrics-addr=0', '--health-addr=0', ...flags], { COIL_NODE_NAME: 'n1' }), kubeConfig: kubeConfig(), logger: silentLogger() });
}

describe("coild's loops", () => {
  it('are runnables of its Manager (GC joins once coild serves), so they stop with it, newest first', () => {
    assert.deepEqual(coild().manager.runnableNames(), ['egress-watcher', 'egress-steering', 'egress-snat-routes', 'block-export', 'block-request', 'block-release']);
    assert.deepEqual(coild('--enable-egress=false').manager.runnableNames(), ['block-export', 'block-request', 'block-release']);
    assert.deepEqual(coild('--enable-ipam=false').manager.runnableNames(), ['egress-watcher', 'egress-steering', 'egress-snat-routes']);
    assert.deepEqual(coild('--egress-nat-steering=false').manager.runnableNames(), ['egress-watcher', 'block-export', 'block-request', 'block-release']);
  });
});

describe("coild's shared SNAT address routes", () => {
  it('go to the pod table with coil\'s IPAM, to the main table without it (another CNI routes the pods there), and need the steering', () => {
    assert.equal(coild().snatRouter?.table, 116);
    assert.equal(coild('--pod-table-id=200').snatRouter?.table, 200);
    assert.equal(coild('--enable-ipam=false').snatRouter?.table, 254);
    assert.equal(coild('--egress-nat-steering=false').snatRouter, undefined);
  });
});

describe("coild's API transport", () => {
  it('speaks HTTP/2 unless --api-http2=false', () => {
    assert.equal(coild().manager.transport.http2, true);
    assert.equal(coild('--api-http2=false').manager.transport.http2, false);
    assert.throws(() => coild('--api-http2=no'), /api-http2/);
  });
});
