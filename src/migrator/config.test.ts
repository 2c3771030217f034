import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, parseConfig, parseDuration } from './config.js';

describe('coil-migrator flags', () => {
  it('dump defaults are etcdutil\'s: local endpoint, /coil/ prefix, 2 s timeout', () => {
    assert.deepEqual(parseConfig(['dump'], {}), {
      command: 'dump',
      etcd: { endpoints: ['http://127.0.0.1:2379'], prefix: '/coil/', timeoutMs: 2000 },
      dryRun: false,
      skipUninstall: false,
    });
  });

  it('dump takes every etcd flag, the kubeconfig and the switches', () => {
    const cfg = parseConfig([
      'dump', '--etcd-endpoints=https://10.0.0.1:2379, https://10.0.0.2:2379', '--etcd-prefix=/custom/', '--etcd-timeout=500ms',
      '--etcd-username=coil', '--etcd-password=secret', '--etcd-tls-ca=/ca.pem', '--etcd-tls-cert=/c.pem', '--etcd-tls-key=/k.pem',
      '--kubeconfig=/kc', '--dry-run', '--skip-uninstall',
    ], {});
    assert.deepEqual(cfg, {
      command: 'dump',
      etcd: {
        endpoints: ['https://10.0.0.1:2379', 'https://10.0.0.2:2379'], prefix: '/custom/', timeoutMs: 500,
        username: 'coil', password: 'secret', tlsCa: '/ca.pem', tlsCert: '/c.pem', tlsKey: '/k.pem',
      },
      dryRun: true,
      skipUninstall: true,
      kubeconfig: '/kc',
    });
  });

  it('$KUBECONFIG is used when --kubeconfig is absent', () => {
    assert.equal(parseConfig(['replace'], { KUBECONFIG: '/env/kc' }).kubeconfig, '/env/kc');
  });

  it('replace defaults: prompt, 10 s between nodes, bare pods kept, the chart\'s coild labels', () => {
    assert.deepEqual(parseConfig(['replace'], {}), {
      command: 'replace', yes: false, intervalMs: 10_000, podTimeoutMs: 300_000, deleteBarePods: false,
      coildNamespace: 'kube-system', coildSelector: 'app.kubernetes.io/name=coil,app.kubernetes.io/component=coild',
    });
    const cfg = parseConfig(['replace', '-y', '--interval=0', '--delete-bare-pods', '--coild-selector=app=coild'], {});
    assert.equal(cfg.command === 'replace' && cfg.yes && cfg.intervalMs === 0 && cfg.deleteBarePods && cfg.coildSelector, 'app=coild');
  });

  const bad: [string, string[], RegExp][] = [
    ['no command', [], /missing command/],
    ['an unknown command', ['convert'], /unknown command "convert"/],
    ['an unknown flag', ['dump', '--etcd-endpoint=x'], /Unknown option '--etcd-endpoint'/],
    ['an @name endpoint (not resolved)', ['dump', '--etcd-endpoints=@cke-etcd'], /"@cke-etcd" is not an http\(s\):\/\/host:port URL/],
    ['a bad duration', ['dump', '--etcd-timeout=2 seconds'], /--etcd-timeout: invalid duration "2 seconds"/],
    ['a zero timeout', ['dump', '--etcd-timeout=0'], /--etcd-timeout must be positive/],
    ['a certificate without its key', ['dump', '--etcd-tls-cert=/c.pem'], /--etcd-tls-cert and --etcd-tls-key go together/],
    ['a user without a password', ['dump', '--etcd-username=u'], /--etcd-username and --etcd-password go together/],
    ['a dump flag on replace', ['replace', '--dry-run'], /Unknown option '--dry-run'/],
  ];
  for (const [what, argv, message] of bad) {
    it(`refuses ${what}`, () => {
      assert.throws(() => parseConfig(argv, {}), (e: unknown) => e instanceof ConfigError && message.test(e.message));
    });
  }

  it('parses Go durations', () => {
    assert.deepEqual(['2s', '500ms', '1m30s', '1h', '0', '1.5s'].map((t) => parseDuration('x', t)), [2000, 500, 90_000, 3_600_000, 0, 1500]);
  });
});
