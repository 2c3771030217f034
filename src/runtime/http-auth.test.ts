import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, test } from 'node:test';
import { bearerToken, RequestAuthorizer } from './http-auth.js';
import { verbOf } from './secure-serving.js';
import type { Clock } from './clock.js';

/** A clock stepped by hand. */
function manualClock(): Clock & { advance(ms: number): void } {
  let now = 0;
  return { now: () => now, setTimeout: () => 0, clearTimeout: () => undefined, advance: (ms) => void (now += ms) };
}

const req = (authorization?: string, extra: Record<string, string> = {}): IncomingMessage =>
  ({ headers: { ...(authorization !== undefined && { authorization }), ...extra } }) as unknown as IncomingMessage;

/** A stand-in API client answering reviews: tokens `good-*` are user `alice`, allowed `/metrics` only. */
function reviewer() {
  const calls: string[] = [];
  let failing = false;
  const client = {
    create: async (kind: { kind: string }, obj: { spec: { token?: string; user?: string; nonResourceAttributes?: { path: string } } }) => {
      calls.push(kind.kind);
      if (failing) throw new Error('apiserver down');
      if (kind.kind === 'TokenReview') {
        const ok = obj.spec.token!.startsWith('good-');
        return { status: ok ? { authenticated: true, user: { username: 'alice', groups: ['ops'] } } : { authenticated: false, error: 'invalid bearer token' } };
      }
      return { status: { allowed: obj.spec.nonResourceAttributes!.path === '/metrics' } };
    },
  };
  return { client: client as never, calls, fail: (f: boolean) => void (failing = f) };
}

describe('RequestAuthorizer', () => {
  test('no token: 401 without a review; Authorization first, else X-Coil-Authorization', async () => {
    const r = reviewer();
    const a = new RequestAuthorizer({ client: r.client, clock: manualClock() });
    assert.deepEqual(await a.decide(req(), { path: '/metrics', verb: 'get' }), { allowed: false, status: 401, reason: 'Unauthorized: a bearer token is required' });
    assert.equal((await a.decide(req('Basic abc'))).allowed, false);
    assert.deepEqual(r.calls, []);
    assert.equal(bearerToken(req('Bearer good-1')), 'good-1');
    assert.equal(bearerToken(req(undefined, { 'x-coil-authorization': 'Bearer good-2' })), 'good-2');
    assert.equal(bearerToken(req('Bearer good-1', { 'x-coil-authorization': 'Bearer good-2' })), 'good-1');
  });

  test('accepted and allowed: cached for their TTLs, then reviewed again', async () => {
    const r = reviewer();
    const clock = manualClock();
    const a = new RequestAuthorizer({ client: r.client, clock });
    const at = { path: '/metrics', verb: 'get' };
    assert.equal((await a.decide(req('Bearer good-1'), at)).allowed, true);
    for (let i = 0; i < 10; i++) assert.equal((await a.decide(req('Bearer good-1'), at)).allowed, true);
    assert.deepEqual(r.calls, ['TokenReview', 'SubjectAccessReview']);
    clock.advance(120_001);
    assert.equal((await a.decide(req('Bearer good-1'), at)).allowed, true);
    assert.deepEqual(r.calls, ['TokenReview', 'SubjectAccessReview', 'TokenReview'], 'the token again after 2 min, the decision kept 5 min');
    clock.advance(100_000);
    await a.decide(req('Bearer good-1'), at);
    assert.equal(r.calls.length, 3, 'at 220 s both are still cached');
    clock.advance(80_000);
    await a.decide(req('Bearer good-1'), at);
    assert.deepEqual(r.calls.slice(3), ['TokenReview', 'SubjectAccessReview'], 'at 300 s both again');
  });

  test('refused token 401 and denied path 403, each cached 30 s', async () => {
    const r = reviewer();
    const clock = manualClock();
    const a = new RequestAuthorizer({ client: r.client, clock });
    assert.deepEqual(await a.decide(req('Bearer bad'), { path: '/metrics', verb: 'get' }), { allowed: false, status: 401, reason: 'Unauthorized: invalid bearer token' });
    const denied = await a.decide(req('Bearer good-1'), { path: '/ipam', verb: 'get' });
    assert.equal(denied.allowed, false);
    assert.equal(!denied.allowed && denied.status, 403);
    assert.match(!denied.allowed ? denied.reason : '', /^Forbidden: user "alice" cannot get path "\/ipam"/);
    await a.decide(req('Bearer bad'), { path: '/metrics', verb: 'get' });
    await a.decide(req('Bearer good-1'), { path: '/ipam', verb: 'get' });
    assert.equal(r.calls.length, 3);
    clock.advance(30_001);
    await a.decide(req('Bearer bad'), { path: '/metrics', verb: 'get' });
    assert.equal(r.calls.length, 4);
  });

  test('reviews come from a bucket (burst, then a rate): made-up tokens beyond it get 429 without a review', async () => {
    const r = reviewer();
    const clock = manualClock();
    const a = new RequestAuthorizer({ client: r.client, clock, rate: { burst: 3, perSecond: 1 } });
    const statuses: number[] = [];
    for (let i = 0; i < 100; i++) {
      const d = await a.decide(req(`Bearer made-up-${i}`));
      statuses.push(d.allowed ? 200 : d.status);
    }
    assert.equal(r.calls.length, 3);
    assert.deepEqual([statuses.filter((s) => s === 401).length, statuses.filter((s) => s === 429).length], [3, 97]);
    clock.advance(2_000);
    for (let i = 0; i < 10; i++) await a.decide(req(`Bearer other-${i}`));
    assert.equal(r.calls.length, 5, '2 more after 2 s at 1/s');
    assert.equal(a.counters.rateLimited, 105);
  });

  test('concurrent requests with one token share one review; an API failure is 503 and not cached', async () => {
    const r = reviewer();
    const a = new RequestAuthorizer({ client: r.client, clock: manualClock() });
    const all = await Promise.all(Array.from({ length: 20 }, () => a.decide(req('Bearer good-7'))));
    assert.ok(all.every((d) => d.allowed));
    assert.deepEqual(r.calls, ['TokenReview']);
    r.fail(true);
    const d = await a.decide(req('Bearer good-8'));
    assert.equal(!d.allowed && d.status, 503);
    r.fail(false);
    assert.equal((await a.decide(req('Bearer good-8'))).allowed, true);
  });

  test('verbs of methods, as the API server maps them for non-resource paths', () => {
    assert.deepEqual(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'].map(verbOf), ['get', 'get', 'create', 'update', 'patch', 'delete']);
  });
});
