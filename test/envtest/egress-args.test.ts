/**
 * Contract between the Egress controller and coil-egress: the container the controller builds
 * (args and env) is accepted by coil-egress's own flag parser and means what the Egress says —
 * the FoU port of the Service, the automatic source port when `fouSourcePortAuto` is set, and the
 * shared SNAT addresses of `snatAddresses`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Egress } from '../../src/api/v2/egress.js';
import { parseEgressConfig } from '../../src/egress-agent/config.js';
import { desiredDeployment, desiredService } from '../../src/reconcilers/egress-objects.js';
import { DEFAULT_EGRESS_OPTIONS } from '../../src/reconcilers/egress-options.js';

for (const [fouPort, auto] of [[5555, false], [6000, true]] as const) {
  test(`coil-egress accepts the controller's container (port ${fouPort}, sport auto ${auto})`, () => {
    const egress: Egress = { metadata: { namespace: 'internet', name: 'nat', uid: 'u' }, spec: { destinations: ['0.0.0.0/0'], replicas: 1, sessionAffinity: 'ClientIP', fouSourcePortAuto: auto } };
    const opts = { ...DEFAULT_EGRESS_OPTIONS, fouPort };
    const c = desiredDeployment(egress, opts).spec!.template.spec!.containers[0]!;
    // The kubelet resolves the fieldRef to the pod's IPs, comma-joined.
    const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value ?? '10.1.0.5,fd00::5']));
    const cfg = parseEgressConfig(c.args ?? [], { ...env, HOSTNAME: 'nat-abc' });
    assert.deepEqual([cfg.namespace, cfg.egressName, cfg.podAddresses], ['internet', 'nat', ['10.1.0.5', 'fd00::5']]);
    assert.equal(cfg.fouPort, desiredService(egress, opts).spec!.ports![0]!.port);
    assert.equal(cfg.isSourcePortAuto, auto);
    assert.equal(c.ports?.find((p) => p.name === 'metrics')?.containerPort, cfg.metricsAddr?.port);
    assert.equal(c.ports?.find((p) => p.name === 'health')?.containerPort, cfg.healthAddr?.port);
  });
}

test("coil-egress reads the Egress's shared SNAT addresses from the controller's container", () => {
  const egress: Egress = { metadata: { namespace: 'internet', name: 'nat', uid: 'u' }, spec: { destinations: ['0.0.0.0/0', '::/0'], replicas: 1, sessionAffinity: 'ClientIP', snatAddresses: ['203.0.113.10', '2001:db8::10'] } };
  const c = desiredDeployment(egress, DEFAULT_EGRESS_OPTIONS).spec!.template.spec!.containers[0]!;
  const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value ?? '10.1.0.5,fd00::5']));
  assert.deepEqual(parseEgressConfig(c.args ?? [], env).snatAddresses, ['203.0.113.10', '2001:db8::10']);
  // Without the field, coil-egress masquerades as Coil's does.
  const plain = desiredDeployment({ ...egress, spec: { ...egress.spec, snatAddresses: undefined } as Egress['spec'] }, DEFAULT_EGRESS_OPTIONS).spec!.template.spec!.containers[0]!;
  assert.deepEqual(parseEgressConfig(plain.args ?? [], env).snatAddresses, []);
});
