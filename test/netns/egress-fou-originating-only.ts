/**
 * Originating-only egress through real FoU tunnels: steps of egress-fou-scenario.ts (run in the VM
 * of egress-fou-vm.test.ts). A host X outside the cluster opens a TCP connection to the client pod
 * C, which has an Egress for X's network:
 * - mode off: C's reply goes into the tunnel, is masqueraded by the egress pod, and X never gets
 *   an answer from the address it called;
 * - mode on (each backend): X is answered through eth0, while a connection C opens to X still goes
 *   through the tunnel and reaches X with the egress pod's address;
 * - mode off again: the rules are gone and the reply takes the tunnel again.
 */
import type { NetfilterBackend } from '../../src/api/v2/keys.js';
import type { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';
import type { TestNetns } from './test-netns.js';
import { EgressClient, type EgressClientPlan } from '../../src/node-agent/egress/egress-client.js';
import { OriginatingOnly } from '../../src/node-agent/egress/originating-only.js';
import { peerSeenBy } from './egress-peer.js';

/** The scenario's namespaces and addresses this part needs. */
export interface OriginatingOnlyScene {
  ip: IpRunner;
  /** Client pod, node, egress-side target. */
  c: TestNetns;
  x: TestNetns;
  /** C's IPv4 address, X's IPv4 address, X's gateway (the node), the egress pod's IPv4 address. */
  podIp: string;
  outsideIp: string;
  outsideGateway: string;
  egressIp: string;
  /** The client plan in force (a gateway covering X's network). */
  plan: EgressClientPlan;
  port: number;
  step: (name: string, ok: boolean, why?: string) => void;
}

/** Runs the steps; leaves the client in the plan with the mode off, and X's extra route removed. */
export async function originatingOnlySteps(s: OriginatingOnlyScene): Promise<void> {
  const { ip, c, x } = s;
  const podNet = `${s.podIp.split('.').slice(0, 3).join('.')}.0/24`;
  await ip.batch([['route', 'add', podNet, 'via', s.outsideGateway]], { netns: x.path });
  const withMode = (backend: NetfilterBackend, enabled: boolean) =>
    new EgressClient({ ip, port: s.port, originatingOnly: { enabled, applier: new OriginatingOnly({ ip, backend }) } });
  let port = 8090;

  await withMode('iptables', false).apply(c.path, s.plan);
  const off = await peerSeenBy(c, s.podIp, port++, x);
  s.step('originating-only off: a connection from outside to the client pod gets no answer (the reply takes the tunnel)', off !== s.outsideIp, off);

  for (const backend of ['nftables', 'iptables'] as const) {
    await withMode(backend, true).apply(c.path, s.plan);
    const on = await peerSeenBy(c, s.podIp, port++, x);
    const own = await peerSeenBy(x, s.outsideIp, port++, c);
    s.step(`originating-only on (${backend}): answered through eth0, while the pod's own connection still leaves masqueraded through the tunnel`,
      on === s.outsideIp && own === s.egressIp, `${on} ${own}`);
    await withMode(backend, false).apply(c.path, s.plan);
  }

  const again = await peerSeenBy(c, s.podIp, port++, x);
  const rules = await ip.json<Array<{ priority: number }>>(['rule', 'show'], { netns: c.path, family: 4 });
  s.step('originating-only off again: its rule is gone and the reply takes the tunnel again', again !== s.outsideIp && !rules.some((r) => r.priority === 1000), again);
  await ip.batch([['route', 'del', podNet, 'via', s.outsideGateway]], { netns: x.path });
}
