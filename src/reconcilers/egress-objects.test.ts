import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Egress, EgressSpec } from '../api/v2/egress.js';
import { DEFAULT_EGRESS_OPTIONS } from './egress-options.js';
import { desiredDeployment, desiredPdb, desiredService, egressStatus, isControlledBy, serializeSelector } from './egress-objects.js';

const opts = { ...DEFAULT_EGRESS_OPTIONS, image: 'img:1', fouPort: 6000 };
const egress = (spec: Partial<EgressSpec> = {}): Egress => ({
  metadata: { name: 'nat', namespace: 'internet', uid: 'u-1' },
  spec: { destinations: ['0.0.0.0/0'], replicas: 2, sessionAffinity: 'ClientIP', ...spec },
});
const SELECTOR = { 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/component': 'egress', 'app.kubernetes.io/instance': 'nat' };

describe('desiredDeployment', () => {
  test('an Egress without template gets Coil defaults, with --fou-port and without forcing user values', () => {
    const d = desiredDeployment(egress({ fouSourcePortAuto: true }), opts);
    assert.deepEqual(d.metadata?.labels, SELECTOR);
    assert.deepEqual(d.metadata?.ownerReferences, [{ apiVersion: 'coil.cybozu.com/v2', kind: 'Egress', name: 'nat', uid: 'u-1', controller: true, blockOwnerDeletion: true }]);
    assert.equal(d.spec?.replicas, 2);
    assert.deepEqual(d.spec?.selector, { matchLabels: SELECTOR });
    assert.deepEqual(d.spec?.strategy, { type: 'RollingUpdate', rollingUpdate: { maxSurge: '25%', maxUnavailable: '25%' } });
    assert.deepEqual(d.spec?.template.metadata, { labels: SELECTOR });
    const pod = d.spec!.template.spec!;
    assert.equal(pod.serviceAccountName, 'coil-egress');
    assert.deepEqual(pod.volumes, [{ name: 'run', emptyDir: {} }, { name: 'modules', hostPath: { path: '/lib/modules' } }]);
    assert.deepEqual(pod.containers, [
      {
        name: 'egress',
        image: 'img:1',
        command: ['coil-egress'],
        args: ['--fou-port=6000', '--backend=iptables', '--enable-sport-auto'],
        env: [
          { name: 'COIL_POD_NAMESPACE', value: 'internet' },
          { name: 'COIL_EGRESS_NAME', value: 'nat' },
          { name: 'COIL_POD_ADDRESSES', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'status.podIPs' } } },
        ],
        volumeMounts: [{ name: 'run', mountPath: '/run' }, { name: 'modules', mountPath: '/lib/modules', readOnly: true }],
        securityContext: { privileged: true, readOnlyRootFilesystem: true, capabilities: { add: ['NET_ADMIN'] } },
        resources: { requests: { cpu: '100m', memory: '200Mi' } },
        ports: [{ name: 'metrics', containerPort: 8080, protocol: 'TCP' }, { name: 'health', containerPort: 8081, protocol: 'TCP' }],
        livenessProbe: { httpGet: { path: '/healthz', port: 'health' } },
        readinessProbe: { httpGet: { path: '/readyz', port: 'health' } },
      },
    ]);
  });

  test('the template is kept: labels (selector wins), annotations, other containers, user container values', () => {
    const d = desiredDeployment(
      egress({
        strategy: { type: 'Recreate' },
        template: {
          metadata: { labels: { team: 'net', 'app.kubernetes.io/instance': 'other' }, annotations: { a: 'b' } },
          spec: {
            serviceAccountName: 'mine',
            volumes: [{ name: 'run', hostPath: { path: '/run/x' } }],
            containers: [
              { name: 'sidecar', image: 's' },
              {
                name: 'egress',
                image: 'mine:2',
                args: ['--custom'],
                env: [{ name: 'COIL_EGRESS_NAME', value: 'spoofed' }, { name: 'X', value: 'y' }],
                securityContext: { privileged: false, readOnlyRootFilesystem: false, capabilities: { add: ['NET_RAW'] } },
                resources: { requests: { cpu: '1' } },
                ports: [{ name: 'metrics', containerPort: 9999 }],
              },
            ],
          },
        },
      }),
      opts,
    );
    assert.deepEqual(d.spec?.strategy, { type: 'Recreate' });
    assert.deepEqual(d.spec?.template.metadata, { labels: { team: 'net', ...SELECTOR }, annotations: { a: 'b' } });
    const pod = d.spec!.template.spec!;
    assert.equal(pod.serviceAccountName, 'coil-egress');
    assert.deepEqual(pod.volumes?.map((v) => v.name), ['run', 'modules']);
    assert.deepEqual(pod.containers.map((c) => c.name), ['sidecar', 'egress']);
    assert.deepEqual(pod.containers[0], { name: 'sidecar', image: 's' });
    const c = pod.containers[1]!;
    assert.equal(c.image, 'mine:2');
    assert.deepEqual(c.args, ['--custom']);
    assert.deepEqual(c.env?.map((e) => `${e.name}=${e.value ?? ''}`), ['X=y', 'COIL_POD_NAMESPACE=internet', 'COIL_EGRESS_NAME=nat', 'COIL_POD_ADDRESSES=']);
    assert.deepEqual(c.securityContext, { privileged: false, readOnlyRootFilesystem: false, capabilities: { add: ['NET_RAW', 'NET_ADMIN'] } });
    assert.deepEqual(c.resources, { requests: { cpu: '1', memory: '200Mi' } });
    assert.deepEqual(c.ports, [{ name: 'metrics', containerPort: 9999 }, { name: 'health', containerPort: 8081, protocol: 'TCP' }]);
  });

  test("the drain fits the template's grace period: --drain-timeout is the grace less 5 s, at least 0; none without a grace period", () => {
    const args = (spec: EgressSpec['template']) => desiredDeployment(egress({ template: spec }), opts).spec!.template.spec!.containers[0]!.args;
    assert.deepEqual(args({ spec: { containers: [], terminationGracePeriodSeconds: 120 } }), ['--fou-port=6000', '--backend=iptables', '--drain-timeout=115s']);
    assert.deepEqual(args({ spec: { containers: [], terminationGracePeriodSeconds: 3 } }), ['--fou-port=6000', '--backend=iptables', '--drain-timeout=0s']);
    assert.deepEqual(args({ spec: { containers: [], terminationGracePeriodSeconds: 0 } }), ['--fou-port=6000', '--backend=iptables', '--drain-timeout=0s']);
    // Without one, the pod has Kubernetes' 30 s and coil-egress's default 25 s fits it.
    assert.deepEqual(args({ spec: { containers: [] } }), ['--fou-port=6000', '--backend=iptables']);
    // The user's args are the user's: nothing is added to them.
    assert.deepEqual(args({ spec: { containers: [{ name: 'egress', args: ['--x'] }], terminationGracePeriodSeconds: 120 } }), ['--x']);
  });

  test('shared SNAT addresses reach coil-egress as --snat-addresses, canonical and comma-joined; none without them or with given args', () => {
    const args = (spec: Partial<EgressSpec>) => desiredDeployment(egress(spec), opts).spec!.template.spec!.containers[0]!.args;
    assert.deepEqual(args({ snatAddresses: ['203.0.113.10', '2001:DB8:0::10'], fouSourcePortAuto: true, template: { spec: { containers: [], terminationGracePeriodSeconds: 60 } } }),
      ['--fou-port=6000', '--backend=iptables', '--enable-sport-auto', '--snat-addresses=203.0.113.10,2001:db8::10', '--drain-timeout=55s']);
    assert.deepEqual(args({ snatAddresses: [] }), ['--fou-port=6000', '--backend=iptables']);
    assert.deepEqual(args({ snatAddresses: ['203.0.113.10'], template: { spec: { containers: [{ name: 'egress', args: ['--x'] }] } } }), ['--x']);
  });

  test("a controller run with --secure-endpoints=false gives its NAT pods Coil's plain HTTP metrics too", () => {
    const args = (o: typeof opts) => desiredDeployment(egress({}), o).spec!.template.spec!.containers[0]!.args;
    assert.deepEqual(args({ ...opts, secureEndpoints: false }), ['--fou-port=6000', '--backend=iptables', '--secure-endpoints=false']);
    assert.deepEqual(args({ ...opts, secureEndpoints: true }), ['--fou-port=6000', '--backend=iptables']);
  });

  test('the input Egress is not modified', () => {
    const e = egress({ template: { spec: { containers: [{ name: 'egress' }] } } });
    const before = structuredClone(e);
    desiredDeployment(Object.freeze(e), opts);
    assert.deepEqual(e, before);
  });
});

describe('desiredService', () => {
  test('UDP on the FoU port, dual-stack preferred, ClientIP with the default or given timeout', () => {
    const s = desiredService(egress(), opts);
    assert.deepEqual(s.spec, {
      type: 'ClusterIP',
      selector: SELECTOR,
      ports: [{ port: 6000, targetPort: 6000, protocol: 'UDP' }],
      sessionAffinity: 'ClientIP',
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 10800 } },
      ipFamilyPolicy: 'PreferDualStack',
    });
    assert.deepEqual(desiredService(egress({ sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } }), opts).spec?.sessionAffinityConfig, { clientIP: { timeoutSeconds: 60 } });
  });
  test('None carries no affinity config, even when the spec has one', () => {
    const s = desiredService(egress({ sessionAffinity: 'None', sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } }), opts);
    assert.equal(s.spec?.sessionAffinity, 'None');
    assert.equal('sessionAffinityConfig' in s.spec!, false);
  });
});

describe('desiredPdb', () => {
  test('absent unless asked; only the field given', () => {
    assert.equal(desiredPdb(egress()), undefined);
    assert.deepEqual(desiredPdb(egress({ podDisruptionBudget: { maxUnavailable: '50%' } }))?.spec, { selector: { matchLabels: SELECTOR }, maxUnavailable: '50%' });
    assert.deepEqual(desiredPdb(egress({ podDisruptionBudget: { minAvailable: 1 } }))?.spec, { selector: { matchLabels: SELECTOR }, minAvailable: 1 });
  });
});

describe('status and ownership', () => {
  test('selector sorted by key; replicas from availableReplicas', () => {
    assert.equal(serializeSelector({ b: '2', a: '1' }), 'a=1,b=2');
    assert.deepEqual(egressStatus(egress(), undefined), { replicas: 0, selector: 'app.kubernetes.io/component=egress,app.kubernetes.io/instance=nat,app.kubernetes.io/name=coil' });
    assert.equal(egressStatus(egress(), { status: { availableReplicas: 3, replicas: 4 } }).replicas, 3);
  });
  test('isControlledBy matches the controller reference by uid', () => {
    const d = desiredDeployment(egress(), opts);
    assert.equal(isControlledBy(d, egress()), true);
    assert.equal(isControlledBy(d, { ...egress(), metadata: { name: 'nat', namespace: 'internet', uid: 'u-2' } }), false);
    assert.equal(isControlledBy({ metadata: {} }, egress()), false);
  });
});

describe('fallback image', () => {
  test('is the chart image at the chart appVersion', async () => {
    const { readFile } = await import('node:fs/promises');
    const { FALLBACK_EGRESS_IMAGE } = await import('./egress-options.js');
    const root = new URL('../../../charts/coil/', import.meta.url);
    const appVersion = /^appVersion:\s*"?([^"\n]+)"?$/m.exec(await readFile(new URL('Chart.yaml', root), 'utf8'))?.[1];
    const repository = /^\s+repository:\s*(\S+)$/m.exec(await readFile(new URL('values.yaml', root), 'utf8'))?.[1];
    assert.equal(FALLBACK_EGRESS_IMAGE, `${repository}:${appVersion}`);
  });
});
