import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import 'reflect-metadata';
import { Container } from 'inversify';
import { BlockRequestReconciler } from '../reconcilers/blockrequest.js';
import { controllerSettings } from '../runtime/controller.js';
import { Registry } from '../runtime/registry.js';
import { parseConfig, parseReleaseFinalizersConfig } from './config.js';
import { addIpam, bindIpam } from './ipam-registry.js';

describe('coil-controller Egress flags', () => {
  test('defaults: both parts on, port 5555, nftables, image from the Pod', () => {
    const c = parseConfig([], {});
    assert.deepEqual([c.enableIpam, c.enableEgress, c.egress], [true, true, { fouPort: 5555, backend: 'iptables' }]);
  });
  test('the chart args and explicit values are taken', () => {
    const c = parseConfig(['--enable-ipam=false', '--enable-egress=true', '--egress-port=6000', '--backend=iptables', '--egress-image=example.com/coil:1'], {});
    assert.deepEqual([c.enableIpam, c.enableEgress, c.egress], [false, true, { fouPort: 6000, backend: 'iptables', image: 'example.com/coil:1' }]);
  });
  test('bad values are refused naming the flag', () => {
    assert.throws(() => parseConfig(['--backend=pf'], {}), /--backend: expected "iptables" or "nftables", got "pf"/);
    assert.throws(() => parseConfig(['--egress-port=70000'], {}), /--egress-port: invalid port "70000"/);
    assert.throws(() => parseConfig(['--enable-egress=maybe'], {}), /--enable-egress: expected true or false/);
    assert.throws(() => parseConfig(['--enable-ipam=false', '--enable-egress=false'], {}), /nothing to run/);
  });
});

describe('coil-controller IPAM flags', () => {
  test("defaults are Coil's: ports 9386/9387/9443, /certs, GC every hour; ours: reclaim after 1 h, requests kept 5 min", () => {
    const c = parseConfig([], {});
    assert.deepEqual([c.metricsAddr, c.healthAddr, c.webhookAddr], [{ host: '0.0.0.0', port: 9386 }, { host: '0.0.0.0', port: 9387 }, { host: '0.0.0.0', port: 9443 }]);
    assert.equal(c.certDir, '/certs');
    assert.deepEqual([c.ipam.gcIntervalMs, c.ipam.nodeNotReadyReclaimMs, c.ipam.blockRequestTtlMs], [3_600_000, 3_600_000, 300_000]);
    assert.deepEqual([c.leaderElect, c.leaderElectionId, c.leaderElectionNamespace], [true, 'coil-leader', 'kube-system']);
    assert.equal(c.apiHttp2, true);
    assert.equal(parseConfig(['--api-http2=false'], {}).apiHttp2, false);
    assert.deepEqual([c.secureEndpoints, parseConfig(['--secure-endpoints=false'], {}).secureEndpoints], [true, false]);
  });
  test('Go durations, host:port addresses, 0 disabling metrics, the pod namespace for the lease', () => {
    const c = parseConfig(['--gc-interval=1h30m', '--blockrequest-ttl=0', '--node-notready-reclaim=250ms', '--metrics-addr=0', '--health-addr=127.0.0.1:8081'], { COIL_POD_NAMESPACE: 'coil' });
    assert.deepEqual([c.ipam.gcIntervalMs, c.ipam.blockRequestTtlMs, c.ipam.nodeNotReadyReclaimMs], [5_400_000, 0, 250]);
    assert.equal(c.metricsAddr, undefined);
    assert.deepEqual(c.healthAddr, { host: '127.0.0.1', port: 8081 });
    assert.equal(c.leaderElectionNamespace, 'coil');
  });
  test("Coil's zap flags are accepted; bad durations and a zero GC interval are refused", () => {
    assert.equal(parseConfig(['--zap-stacktrace-level=panic', '--zap-log-level=debug'], {}).logLevel, 'debug');
    assert.throws(() => parseConfig(['--gc-interval=soon'], {}), /invalid duration "soon"/);
    assert.throws(() => parseConfig(['--gc-interval=0'], {}), /--gc-interval must be positive/);
  });
});

describe('coil-controller Go flag forms (one flag table)', () => {
  test('a bare boolean is true, --flag value works for non-booleans, an unknown flag is named', () => {
    assert.equal(parseConfig(['--leader-elect=false', '--enable-webhooks'], {}).leaderElect, false);
    assert.equal(parseConfig(['-enable-webhooks=false'], {}).enableWebhooks, false);
    assert.equal(parseConfig(['--leader-election-id', 'x'], {}).leaderElectionId, 'x');
    assert.throws(() => parseConfig(['--leader-election'], {}), /Unknown option '--leader-election'/);
    assert.throws(() => parseConfig(['--metrics-addr=:x'], {}), /--metrics-addr: invalid address ":x"/);
  });
  test('release-finalizers: --namespace and --release required, --wait a Go duration (90 s)', () => {
    assert.deepEqual(parseReleaseFinalizersConfig(['--namespace=kube-system', '--release=coil'], {}), { namespace: 'kube-system', release: 'coil', waitMs: 90_000 });
    assert.deepEqual(parseReleaseFinalizersConfig(['--namespace', 'ns', '--release=r', '--wait=5s', '--kubeconfig=/kc'], {}), { namespace: 'ns', release: 'r', waitMs: 5000, kubeconfig: '/kc' });
    assert.throws(() => parseReleaseFinalizersConfig(['--namespace=ns'], {}), /--namespace and --release are required/);
    assert.throws(() => parseReleaseFinalizersConfig(['--namespace=ns', '--release=r', '--wait=long'], {}), /--wait: invalid duration "long"/);
  });
});

describe('coil-controller --blockrequest-max-concurrent-reconciles', () => {
  /** The workers the Manager gives the blockrequest controller under `argv` (its own path: bindIpam, controllerSettings). */
  const workers = (argv: string[]) => {
    const reg = addIpam(new Registry(), { webhooks: false, addressPool: false, gc: false, findingsMetrics: false }).reconcilers.find((r) => r.target === BlockRequestReconciler)!;
    const container = bindIpam(new Container(), parseConfig(argv, {}).ipam);
    return controllerSettings(reg, (token) => container.get(token)).maxConcurrentReconciles;
  };
  test('reaches the blockrequest controller\'s worker count; default 16', () => {
    assert.equal(workers([]), 16);
    assert.equal(workers(['--blockrequest-max-concurrent-reconciles=64']), 64);
    assert.equal(workers(['--blockrequest-max-concurrent-reconciles', '1']), 1);
  });
  test('anything but an integer ≥ 1 is refused naming the flag', () => {
    for (const bad of ['0', '-4', '2.5', 'many', '']) {
      assert.throws(() => parseConfig([`--blockrequest-max-concurrent-reconciles=${bad}`], {}), /--blockrequest-max-concurrent-reconciles: ".*" is not an integer in \[1, 1024\]/, bad);
    }
  });
});
