import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { activeNatPod, chooseNatPod, placeClient, recoverPlacement, rendezvousChoice, type NatPodView } from './nat-pod-choice.js';

const v4 = fc.tuple(fc.nat(255), fc.nat(255)).map(([a, b]) => `10.64.${a}.${b}`);
const v6 = fc.tuple(fc.nat(0xffff), fc.nat(0xffff)).map(([a, b]) => `fd00:64::${a.toString(16)}:${b.toString(16)}`);
const address = fc.oneof(v4, v6);
/** 1–12 distinct NAT pod addresses and 1–60 distinct client addresses. */
const world = fc.record({
  pods: fc.uniqueArray(address, { minLength: 1, maxLength: 12 }),
  clients: fc.uniqueArray(address, { minLength: 1, maxLength: 60 }),
});

const up = (address: string, over: Partial<NatPodView> = {}): NatPodView => ({ address, serving: true, terminating: false, health: 'up', ...over });

describe('NAT pod choice (rendezvous hashing)', () => {
  test('losing a NAT pod moves only the clients that had it, each to its second choice', () => {
    fc.assert(fc.property(world, fc.nat(), ({ pods, clients }, pick) => {
      const lost = pods[pick % pods.length]!;
      const rest = pods.filter((p) => p !== lost);
      for (const c of clients) {
        const before = rendezvousChoice(c, pods);
        const after = rendezvousChoice(c, rest);
        if (before !== lost) assert.equal(after, before, `client ${c} moved from ${before} to ${after} though ${lost} was lost`);
        else assert.notEqual(after, lost);
      }
    }), { numRuns: 300 });
  });

  test('adding a NAT pod moves only the clients that now rank it first', () => {
    fc.assert(fc.property(world, address, ({ pods, clients }, added) => {
      fc.pre(!pods.includes(added));
      for (const c of clients) {
        const before = rendezvousChoice(c, pods);
        const after = rendezvousChoice(c, [...pods, added]);
        assert.ok(after === before || after === added, `client ${c} moved from ${before} to ${after}, not to the added ${added}`);
      }
    }), { numRuns: 300 });
  });

  test('the choice depends on the set of NAT pods, not on their order', () => {
    fc.assert(fc.property(world, fc.nat(), ({ pods, clients }, seed) => {
      const shuffled = [...pods].sort((a, b) => ((a.length * 31 + seed) % 7) - ((b.length * 17 + seed) % 5) || (a < b ? -1 : 1));
      for (const c of clients) assert.equal(rendezvousChoice(c, shuffled), rendezvousChoice(c, pods));
    }), { numRuns: 100 });
  });

  test('clients spread evenly: 3000 clients over 3 NAT pods, each pod 30–37 %; over 10 pods each 8–12 %', () => {
    for (const n of [3, 10]) {
      const pods = Array.from({ length: n }, (_, i) => `10.64.1.${i + 10}`);
      const counts = new Map<string, number>();
      for (let i = 0; i < 3000; i++) {
        const c = rendezvousChoice(`10.100.${i >> 8}.${i & 255}`, pods)!;
        counts.set(c, (counts.get(c) ?? 0) + 1);
      }
      const share = [...counts.values()].map((k) => k / 3000);
      const [lo, hi] = n === 3 ? [0.30, 0.37] : [0.08, 0.12];
      assert.equal(counts.size, n);
      for (const s of share) assert.ok(s >= lo && s <= hi, `share ${s.toFixed(3)} of ${n} pods: ${JSON.stringify([...counts])}`);
    }
  });

  test('a terminating, not serving or failing NAT pod gets no new clients; the others are chosen by rendezvous', () => {
    fc.assert(fc.property(world, fc.nat(), fc.constantFrom<Partial<NatPodView>>({ terminating: true }, { serving: false }, { health: 'down' }), ({ pods, clients }, pick, bad) => {
      fc.pre(pods.length >= 2);
      const out = pods[pick % pods.length]!;
      const views = pods.map((p) => up(p, p === out ? bad : {}));
      for (const c of clients) {
        assert.equal(chooseNatPod(c, views), rendezvousChoice(c, pods.filter((p) => p !== out)));
      }
    }), { numRuns: 200 });
  });

  test('a NAT pod not probed yet takes clients (the EndpointSlice says it is ready)', () => {
    assert.equal(chooseNatPod('10.100.0.1', [up('10.64.0.1', { health: 'unknown' })]), '10.64.0.1');
  });

  test('no NAT pod takes new flows: terminating ones that still serve and answer; else the ClusterIP (undefined)', () => {
    const draining = [up('10.64.0.1', { terminating: true }), up('10.64.0.2', { terminating: true, health: 'unknown' })];
    assert.equal(chooseNatPod('10.100.0.1', draining), '10.64.0.1');
    assert.equal(chooseNatPod('10.100.0.1', [up('10.64.0.1', { health: 'down' }), up('10.64.0.2', { serving: false })]), undefined);
    assert.equal(chooseNatPod('10.100.0.1', []), undefined);
  });

  test('drain: a client on a terminating NAT pod stays while it serves and answers, then moves; new clients never go there', () => {
    const pods = [up('10.64.0.1', { terminating: true }), up('10.64.0.2'), up('10.64.0.3')];
    assert.equal(chooseNatPod('10.100.0.1', pods, '10.64.0.1'), '10.64.0.1');
    assert.notEqual(chooseNatPod('10.100.0.1', pods), '10.64.0.1');
    assert.notEqual(chooseNatPod('10.100.0.1', [{ ...pods[0]!, serving: false }, ...pods.slice(1)], '10.64.0.1'), '10.64.0.1');
    assert.notEqual(chooseNatPod('10.100.0.1', [{ ...pods[0]!, health: 'down' }, ...pods.slice(1)], '10.64.0.1'), '10.64.0.1');
  });

  test('a NAT pod not ready but not terminating (its process killed or hung) that still answers keeps its clients and gets no new ones; not answering, it loses them', () => {
    const pods = [up('10.64.0.1', { serving: false }), up('10.64.0.2'), up('10.64.0.3')];
    assert.equal(chooseNatPod('10.100.0.1', pods, '10.64.0.1'), '10.64.0.1');
    for (let i = 0; i < 50; i++) assert.notEqual(chooseNatPod(`10.100.1.${i}`, pods), '10.64.0.1', 'a new client went to a NAT pod that is not ready');
    for (const health of ['down', 'unknown'] as const) {
      assert.notEqual(chooseNatPod('10.100.0.1', [{ ...pods[0]!, health }, ...pods.slice(1)], '10.64.0.1'), '10.64.0.1', `not ready and ${health}`);
    }
    assert.notEqual(chooseNatPod('10.100.0.1', [{ ...pods[0]!, terminating: true }, ...pods.slice(1)], '10.64.0.1'), '10.64.0.1', 'not serving and terminating: gone');
  });

  test('a client stays on its current NAT pod while it takes new flows, whatever was added; it leaves one that fails or left', () => {
    fc.assert(fc.property(world, address, ({ pods, clients }, added) => {
      fc.pre(!pods.includes(added));
      const views = [...pods, added].map((p) => up(p));
      for (const c of clients) {
        const current = rendezvousChoice(c, pods)!;
        assert.equal(chooseNatPod(c, views, current), current, 'a NAT pod added moved an established client');
        const rest = views.filter((v) => v.address !== current);
        if (rest.length === 0) continue;
        assert.equal(chooseNatPod(c, [...rest, up(current, { health: 'down' })], current), rendezvousChoice(c, rest.map((v) => v.address)));
        assert.equal(chooseNatPod(c, rest, current), rendezvousChoice(c, rest.map((v) => v.address)), 'a NAT pod that left the slice');
      }
    }), { numRuns: 200 });
  });
});

describe('per-flow drain (placeClient)', () => {
  const A = '10.64.0.1';
  const B = '10.64.0.2';
  const C = '10.64.0.3';
  const client = '10.100.0.5';

  test('a client on a NAT pod turning terminating moves its new flows at once and drains from the old one', () => {
    const pods = [up(A, { terminating: true }), up(B), up(C)];
    const p = placeClient(client, pods, A);
    assert.equal(p.natPod, rendezvousChoice(client, [B, C]));
    assert.deepEqual(p.draining, [A]);
    // Stable: asked again with the new state, nothing changes.
    assert.deepEqual(placeClient(client, pods, p.natPod, p.draining), p);
  });

  test('the drain ends when the old NAT pod stops serving, stops answering or leaves the slice; not before', () => {
    const at = (a: NatPodView) => placeClient(client, [a, up(B)], B, [A]).draining;
    assert.deepEqual(at(up(A, { terminating: true })), [A], 'still serving and answering');
    assert.deepEqual(at(up(A, { terminating: true, health: 'unknown' })), [A], 'not probed yet');
    assert.deepEqual(at(up(A, { terminating: true, serving: false })), [], 'stopped serving');
    assert.deepEqual(at(up(A, { terminating: true, health: 'down' })), [], 'stopped answering');
    assert.deepEqual(placeClient(client, [up(B)], B, [A]).draining, [], 'left the slice');
  });

  test('with no other NAT pod to go to, the client stays on the terminating one entirely (as before)', () => {
    assert.deepEqual(placeClient(client, [up(A, { terminating: true }), up(B, { health: 'down' })], A), { natPod: A, draining: [] });
  });

  test('a NAT process killed or hung (not ready, not terminating, answering) keeps its clients: no drain', () => {
    assert.deepEqual(placeClient(client, [up(A, { serving: false }), up(B)], A), { natPod: A, draining: [] });
  });

  test('the new NAT pod lost during a drain: the tunnel moves on, the drain goes on', () => {
    const p = placeClient(client, [up(A, { terminating: true }), up(B, { health: 'down' }), up(C)], B, [A]);
    assert.deepEqual(p, { natPod: C, draining: [A] });
  });

  test('a second NAT pod terminating during a drain joins it', () => {
    const p = placeClient(client, [up(A, { terminating: true }), up(B, { terminating: true }), up(C)], B, [A]);
    assert.deepEqual(p, { natPod: C, draining: [A, B] });
  });

  test('after a restart the tunnel is the link to the NAT pod that takes new flows; the others are its drains', () => {
    const pods = [up(A, { terminating: true }), up(B)];
    assert.deepEqual(recoverPlacement(pods, [A, B]), { current: B, draining: [A] });
    assert.deepEqual(recoverPlacement(pods, [B, A]), { current: B, draining: [A] });
    assert.deepEqual(recoverPlacement([up(A, { terminating: true })], [A, '10.96.0.1']), { current: A, draining: [] });
    assert.deepEqual(recoverPlacement(pods, []), { current: undefined, draining: [] });
    const r = recoverPlacement(pods, [A, B]);
    assert.deepEqual(placeClient(client, pods, r.current, r.draining), { natPod: B, draining: [A] });
  });

  describe('the active NAT pod of a shared-address Egress', () => {
    test('depends on the Egress and the NAT pods\' states only: the same in any order, from any node', () => {
      fc.assert(fc.property(fc.uniqueArray(address, { minLength: 1, maxLength: 12 }), fc.string(), (pods, egress) => {
        const views = pods.map((a) => up(a));
        const active = activeNatPod(egress, views);
        assert.ok(active !== undefined && pods.includes(active));
        assert.equal(activeNatPod(egress, [...views].reverse()), active);
        // A lost pod that was not the active one changes nothing; the active one's loss picks another.
        for (const lost of pods) {
          const after = activeNatPod(egress, views.map((v) => (v.address === lost ? { ...v, health: 'down' as const } : v)));
          if (lost !== active) assert.equal(after, active);
          else assert.ok(after !== active && (pods.length === 1 ? after === undefined : pods.includes(after!)));
        }
      }), { numRuns: 200 });
    });

    test('never a terminating, unready or down pod while one takes new flows; a terminating one that serves and answers when none does', () => {
      const pods = [up('10.64.0.1', { terminating: true }), up('10.64.0.2', { serving: false }), up('10.64.0.3', { health: 'down' }), up('10.64.0.4')];
      assert.equal(activeNatPod('internet/nat', pods), '10.64.0.4');
      assert.equal(activeNatPod('internet/nat', pods.slice(0, 3)), '10.64.0.1');
      assert.equal(activeNatPod('internet/nat', pods.slice(1, 3)), undefined);
    });
  });
});
