import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { silentLogger } from '../runtime/logging.js';
import { CLIENT_POD_FIELD_SELECTOR, namesEgress, toClientPod, type ClientPod, type ClientPodSource } from './client-pod-source.js';
import { ClientWatcher } from './client-watcher.js';
import { EgressConfigError, parseEgressConfig } from './config.js';
import { missingKernelFeatures, podSyncProblem } from './egress-agent.js';
import { EgressMetrics } from './egress-metrics.js';
import type { FouServer, FouSyncResult } from './fou-server.js';

const env = { COIL_POD_NAMESPACE: 'internet', COIL_EGRESS_NAME: 'nat', COIL_POD_ADDRESSES: '10.1.0.5,fd00::5', HOSTNAME: 'nat-0' };

describe('coil-egress config', () => {
  test("Coil's flags with their defaults; iptables is the default backend, as in Coil", () => {
    const c = parseEgressConfig([], env);
    assert.deepEqual({ ...c, metricsAddr: c.metricsAddr?.port, healthAddr: c.healthAddr?.port }, {
      namespace: 'internet', egressName: 'nat', podAddresses: ['10.1.0.5', 'fd00::5'], podName: 'nat-0', metricsAddr: 8080, healthAddr: 8081,
      fouPort: 5555, isSourcePortAuto: false, backend: 'iptables', outInterface: 'eth0', logLevel: 'info', metricsIntervalMs: 30_000, apiHttp2: true,
      drainTimeoutMs: 25_000, snatAddresses: [], secureEndpoints: true,
    });
    assert.equal(parseEgressConfig(['--api-http2=false'], env).apiHttp2, false);
    assert.equal(parseEgressConfig(['--secure-endpoints=false'], env).secureEndpoints, false);
    assert.equal(parseEgressConfig(['--enable-sport-auto=true', '--fou-port=6000'], env).fouPort, 6000);
    assert.equal(parseEgressConfig(['--enable-sport-auto'], env).isSourcePortAuto, true);
  });

  test('missing environment, a bad port or an unknown backend are refused by name', () => {
    assert.throws(() => parseEgressConfig([], { ...env, COIL_EGRESS_NAME: undefined }), /COIL_EGRESS_NAME/);
    assert.throws(() => parseEgressConfig(['--fou-port=0'], env), EgressConfigError);
    assert.throws(() => parseEgressConfig(['--backend=ipfw'], env), /--backend: expected "iptables" or "nftables", got "ipfw"/);
    assert.equal(parseEgressConfig(['--backend=nftables'], env).backend, 'nftables');
  });

  test('--drain-timeout: a Go duration, 0 = no drain; anything else refused by name', () => {
    assert.equal(parseEgressConfig(['--drain-timeout=90s'], env).drainTimeoutMs, 90_000);
    assert.equal(parseEgressConfig(['--drain-timeout=0'], env).drainTimeoutMs, 0);
    assert.equal(parseEgressConfig(['--drain-timeout=1m30s'], env).drainTimeoutMs, 90_000);
    for (const bad of ['-5s', '30', 'soon', '']) assert.throws(() => parseEgressConfig([`--drain-timeout=${bad}`], env), /--drain-timeout: invalid duration/);
  });

  test('--snat-addresses: comma-separated or repeated, one per family, kept in canonical text', () => {
    assert.deepEqual(parseEgressConfig(['--snat-addresses=203.0.113.10'], env).snatAddresses, ['203.0.113.10']);
    assert.deepEqual(parseEgressConfig(['--snat-addresses=203.0.113.10,2001:DB8:0::10'], env).snatAddresses, ['203.0.113.10', '2001:db8::10']);
    assert.deepEqual(parseEgressConfig(['--snat-addresses', '2001:db8::10', '--snat-addresses=203.0.113.10'], env).snatAddresses, ['2001:db8::10', '203.0.113.10']);
  });

  test('--snat-addresses: anything but plain unicast addresses, one per family, is refused by name', () => {
    const refused = (value: string, why: RegExp) => assert.throws(() => parseEgressConfig([`--snat-addresses=${value}`], env), (e: Error) => e instanceof EgressConfigError && why.test(e.message), value);
    refused('203.0.113.10/32', /^--snat-addresses: "203\.0\.113\.10\/32" must be an IP address, not a CIDR$/);
    refused('nat', /^--snat-addresses: "nat" must be a valid IP address/);
    refused('', /^--snat-addresses: "" must be a valid IP address/);
    refused('203.0.113.10,', /^--snat-addresses: "" must be a valid IP address/);
    refused('fe80::1%eth0', /^--snat-addresses: "fe80::1%eth0" must not include an IPv6 zone$/);
    refused('127.0.0.1', /loopback/);
    refused('224.0.0.5', /multicast/);
    refused('0.0.0.0', /unspecified/);
    refused('169.254.0.1', /link-local/);
    refused('255.255.255.255', /broadcast/);
    refused('::ffff:203.0.113.10', /IPv4-mapped/);
    refused('203.0.113.10,203.0.113.11', /^--snat-addresses: "203\.0\.113\.11" at most one address per family \("203\.0\.113\.10" is IPv4\)$/);
    refused('2001:db8::10,2001:db8:0::10', /^--snat-addresses: "2001:db8:0::10" duplicate of "2001:db8::10"$/);
  });
});

describe('client pods', () => {
  const pod = (annotations: Record<string, string>, extra: object = {}) => ({
    metadata: { namespace: 'app', name: 'p', uid: 'u', annotations }, spec: { containers: [] }, status: { podIPs: [{ ip: '10.2.0.7' }] }, ...extra,
  });

  test('only pods naming this Egress are kept, reduced to their addresses', () => {
    assert.ok(namesEgress({ 'egress.coil.cybozu.com/internet': 'other, nat' }, 'internet', 'nat'));
    assert.ok(!namesEgress({ 'egress.coil.cybozu.com/internet': 'nat2' }, 'internet', 'nat'));
    assert.ok(!namesEgress({ 'egress.coil.cybozu.com/other': 'nat' }, 'internet', 'nat'));
    assert.deepEqual(toClientPod(pod({ 'egress.coil.cybozu.com/internet': 'nat' }), { namespace: 'internet', name: 'nat' }),
      { namespace: 'app', name: 'p', uid: 'u', ips: ['10.2.0.7'] });
    assert.equal(toClientPod(pod({}), { namespace: 'internet', name: 'nat' }), undefined);
    assert.equal(toClientPod(pod({ 'egress.coil.cybozu.com/internet': 'nat' }, { spec: { containers: [], hostNetwork: true } }), { namespace: 'internet', name: 'nat' }), undefined);
  });

  test('the server-side filter drops host-network and finished pods', () => {
    assert.equal(CLIENT_POD_FIELD_SELECTOR, 'spec.hostNetwork=false,status.phase!=Succeeded,status.phase!=Failed');
  });
});

describe('client watcher', () => {
  function setup(pods: ClientPod[], fail = false) {
    const synced: Set<string>[] = [];
    const source = { hasSynced: () => true, list: () => pods } as unknown as ClientPodSource;
    const server = {
      sync: async (s: ReadonlySet<string>): Promise<FouSyncResult> => {
        if (fail) throw new Error('no fou');
        synced.push(new Set(s));
        return { links: new Map([...s].map((ip) => [ip, `fou4_${ip}`])), skipped: [] };
      },
    } as unknown as FouServer;
    const metrics = new EgressMetrics({ namespace: 'internet', egress: 'nat', pod: 'nat-0' }, { defaultMetrics: false });
    return { synced, metrics, watcher: new ClientWatcher({ source, server, metrics, log: silentLogger() }) };
  }

  test('an address shared by two pods is one tunnel; readiness follows the first sync (Coil #227, #286)', async () => {
    const { synced, metrics, watcher } = setup([
      { namespace: 'a', name: 'job-done', uid: '1', ips: ['10.2.0.7'] }, { namespace: 'a', name: 'new', uid: '2', ips: ['10.2.0.7', 'fd00::7'] },
    ]);
    assert.match(watcher.notReadyReason() ?? '', /initial tunnel sync pending/);
    await watcher.syncOnce();
    assert.equal(watcher.notReadyReason(), undefined);
    assert.deepEqual(synced, [new Set(['10.2.0.7', 'fd00::7'])]);
    const text = await metrics.registry.metrics();
    assert.match(text, /coil_egress_client_pod_count\{namespace="internet",egress="nat"\} 2/);
    assert.match(text, /coil_egress_client_pod_info\{namespace="a",pod="new",pod_ip="fd00::7",interface="fou4_fd00::7",egress="nat",egress_namespace="internet"\} 1/);
  });

  test('a failed sync keeps the pod unready and says why', async () => {
    const { watcher } = setup([], true);
    await assert.rejects(watcher.syncOnce());
    assert.match(watcher.notReadyReason() ?? '', /pending/);
  });
});

describe('egress metrics and kernel features', () => {
  test('nft counts become monotonic counters, also across a reset of the rules', async () => {
    const m = new EgressMetrics({ namespace: 'internet', egress: 'nat', pod: 'nat-0' }, { defaultMetrics: false });
    const c = (p: number) => ({ 4: { masqueraded: { packets: p, bytes: p * 60 }, invalid: { packets: 0, bytes: 0 } }, 6: undefined });
    m.setNat(c(5));
    m.setNat(c(8));
    m.setNat(c(2));
    assert.match(await m.registry.metrics(), /coil_egress_nftables_masqueraded_packets_total\{namespace="internet",pod="nat-0",egress="nat",protocol="ipv4"\} 10/);
  });

  test('missing FoU or IPIP is reported with a sentence naming them; IPv6 needs ip6tnl only when the pod has IPv6', () => {
    const all = { veth: true, ipv6: true, vxlan: true, ipip: true, ip6tnl: true, fou: true };
    assert.equal(missingKernelFeatures(all, [4, 6]), undefined);
    assert.match(missingKernelFeatures({ ...all, fou: false, ipip: false }, [4]) ?? '', /^the kernel lacks fou, ipip:/);
    assert.equal(missingKernelFeatures({ ...all, ip6tnl: false }, [4]), undefined);
  });
});

describe('coil-egress readiness', () => {
  test('pod-sync: not ready until the watcher exists and synced its first list, ready after', () => {
    assert.equal(podSyncProblem(undefined), 'client watcher not started');
    assert.equal(podSyncProblem({ notReadyReason: () => 'client pods not listed yet' }), 'client pods not listed yet');
    assert.equal(podSyncProblem({ notReadyReason: () => undefined }), undefined);
  });
});
