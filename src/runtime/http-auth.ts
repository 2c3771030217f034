/**
 * Who may read coil's HTTP endpoints: the bearer token of a request is authenticated by a
 * TokenReview and the request authorized by a SubjectAccessReview at the API server, as
 * controller-runtime's `metrics/filters.WithAuthenticationAndAuthorization` and the kubelet's
 * webhook authentication/authorization do (docs/observability.md#access).
 *
 * What it costs the API server, by construction:
 * - a request without a bearer token: 401, no API request;
 * - a token seen before: its review is cached (accepted {@link AuthCacheOptions.tokenTtlMs}, 2 min,
 *   the kubelet's `--authentication-token-webhook-cache-ttl`; refused `deniedTtlMs`, 30 s), and so
 *   is each decision (allowed `allowedTtlMs`, 5 min, and denied 30 s, the kubelet's
 *   `--authorization-webhook-cache-*-ttl`): a steady scrape costs no API request;
 * - concurrent requests with one uncached token share one review;
 * - every review sent (TokenReview or SubjectAccessReview) takes a token from one bucket per
 *   process, {@link DEFAULT_REVIEW_RATE} (burst 10, 2 per second): when it is empty the request
 *   is answered 429 without a review, so made-up tokens cost the API server at most 10 + 2 per
 *   second of requests, however many arrive.
 *
 * A refused review is no proof the token is bad for ever (the API server may have failed), hence
 * the short negative TTL; an API error is answered 503 and not cached.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { V1SubjectAccessReview, V1TokenReview } from '@kubernetes/client-node';
import { Kinds } from '../api/v2/kinds.js';
import type { Client } from './client.js';
import { systemClock, type Clock } from './clock.js';
import { kindRule } from './rbac.js';
import type { RbacRule } from './registry.js';
import { TokenBucket, type BucketRate } from './token-bucket.js';

/** What the API server must allow a program that serves authenticated endpoints. */
export const HTTP_AUTH_RBAC: readonly RbacRule[] = [
  kindRule(Kinds.TokenReview, ['create']),
  kindRule(Kinds.SubjectAccessReview, ['create']),
];

/** Burst 10, then 2 reviews per second: what a process sends the API server at most. */
export const DEFAULT_REVIEW_RATE: BucketRate = Object.freeze({ burst: 10, perSecond: 2 });

/** Cache lifetimes, milliseconds. */
export interface AuthCacheOptions {
  /** An accepted TokenReview. Default 120 000. */
  readonly tokenTtlMs?: number;
  /** An allowed SubjectAccessReview. Default 300 000. */
  readonly allowedTtlMs?: number;
  /** A refused TokenReview or a denied SubjectAccessReview. Default 30 000. */
  readonly deniedTtlMs?: number;
}

/** Constructor options of {@link RequestAuthorizer}. */
export interface RequestAuthorizerOptions extends AuthCacheOptions {
  readonly client: Pick<Client, 'create'>;
  readonly rate?: BucketRate;
  readonly clock?: Clock;
}

/** The user a TokenReview names. */
export interface ReviewedUser {
  readonly username: string;
  readonly uid?: string;
  readonly groups?: readonly string[];
  readonly extra?: Readonly<Record<string, readonly string[]>>;
}

/** The outcome for one request: allowed, or the status and one-line reason to answer. */
export type AuthDecision =
  | { readonly allowed: true; readonly user: ReviewedUser }
  | { readonly allowed: false; readonly status: 401 | 403 | 429 | 503; readonly reason: string };

/** A review the bucket did not let through. */
const RATE_LIMITED = Symbol('rate-limited');

type Cached<T> = { readonly value: T; readonly untilMs: number };

/** Counts of what the authorizer did, for tests and figures. */
export interface AuthCounters {
  tokenReviews: number;
  accessReviews: number;
  rateLimited: number;
}

/**
 * A second header carrying the bearer token, read when `Authorization` is absent: the API server
 * removes `Authorization` from a request it authenticated before its pod proxy forwards it, so
 * `kubectl coil` sends its token to coild through `pods/proxy` in this one (docs/observability.md#access).
 */
export const COIL_AUTHORIZATION_HEADER = 'X-Coil-Authorization';

/** Reads `Authorization: Bearer <token>` (else {@link COIL_AUTHORIZATION_HEADER}). @returns undefined when absent or another scheme */
export function bearerToken(req: IncomingMessage): string | undefined {
  const h = req.headers.authorization ?? req.headers[COIL_AUTHORIZATION_HEADER.toLowerCase()];
  if (Array.isArray(h)) return undefined;
  if (!h) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m?.[1];
}

/** Authenticates and authorizes requests; see the file's comment. One per process. */
export class RequestAuthorizer {
  private readonly clock: Clock;
  private readonly rate: BucketRate;
  private readonly ttl: Required<AuthCacheOptions>;
  private readonly tokens = new Map<string, Cached<ReviewedUser | string>>();
  private readonly decisions = new Map<string, Cached<true | string>>();
  private readonly inFlight = new Map<string, Promise<unknown>>();
  private readonly bucket: TokenBucket;
  readonly counters: AuthCounters = { tokenReviews: 0, accessReviews: 0, rateLimited: 0 };

  constructor(private readonly o: RequestAuthorizerOptions) {
    this.clock = o.clock ?? systemClock;
    this.rate = o.rate ?? DEFAULT_REVIEW_RATE;
    this.ttl = { tokenTtlMs: o.tokenTtlMs ?? 120_000, allowedTtlMs: o.allowedTtlMs ?? 300_000, deniedTtlMs: o.deniedTtlMs ?? 30_000 };
    this.bucket = new TokenBucket(this.rate, this.clock);
  }

  /**
   * Authenticates the request's bearer token; with `authorize`, also asks whether its user may
   * `verb` the non-resource `path` (e.g. `get` `/metrics`).
   */
  async decide(req: IncomingMessage, authorize?: { readonly path: string; readonly verb: string }): Promise<AuthDecision> {
    const token = bearerToken(req);
    if (token === undefined) return { allowed: false, status: 401, reason: 'Unauthorized: a bearer token is required' };
    const tokenKey = createHash('sha256').update(token).digest('base64');
    let user: ReviewedUser | string;
    try {
      const u = await this.cached(this.tokens, `t:${tokenKey}`, () => this.reviewToken(token));
      if (u === RATE_LIMITED) return this.limited();
      user = u;
    } catch (e) {
      return { allowed: false, status: 503, reason: `token review failed: ${(e as Error).message}` };
    }
    if (typeof user === 'string') return { allowed: false, status: 401, reason: `Unauthorized: ${user}` };
    if (!authorize) return { allowed: true, user };
    const u = user;
    const key = `a:${JSON.stringify([u.username, u.uid, u.groups, u.extra, authorize.verb, authorize.path])}`;
    try {
      const d = await this.cached(this.decisions, key, () => this.reviewAccess(u, authorize.path, authorize.verb));
      if (d === RATE_LIMITED) return this.limited();
      if (d !== true) return { allowed: false, status: 403, reason: `Forbidden: user "${u.username}" cannot ${authorize.verb} path "${authorize.path}"${d ? `: ${d}` : ''}` };
    } catch (e) {
      return { allowed: false, status: 503, reason: `access review failed: ${(e as Error).message}` };
    }
    return { allowed: true, user };
  }

  private limited(): AuthDecision {
    this.counters.rateLimited += 1;
    return { allowed: false, status: 429, reason: 'Too many requests with unknown tokens: reviews are rate limited, retry later' };
  }

  /** The cached value, else one shared review that is cached with its TTL (a rate-limited one never is). */
  private async cached<T>(map: Map<string, Cached<T>>, key: string, review: () => Promise<{ value: T; ttlMs: number }>): Promise<T | typeof RATE_LIMITED> {
    const now = this.clock.now();
    const hit = map.get(key);
    if (hit && hit.untilMs > now) return hit.value;
    if (hit) map.delete(key);
    const pending = this.inFlight.get(key) as Promise<T | typeof RATE_LIMITED> | undefined;
    if (pending) return pending;
    if (!this.bucket.tryTake()) return RATE_LIMITED;
    const p = review().then(({ value, ttlMs }) => {
      map.set(key, { value, untilMs: this.clock.now() + ttlMs });
      return value;
    });
    this.inFlight.set(key, p);
    try {
      return await p;
    } finally {
      this.inFlight.delete(key);
      this.sweep(map);
    }
  }

  /** Drops expired entries once the map grows (it holds at most what the bucket let through in a TTL). */
  private sweep<T>(map: Map<string, Cached<T>>): void {
    if (map.size < 256) return;
    const now = this.clock.now();
    for (const [k, v] of map) if (v.untilMs <= now) map.delete(k);
  }

  private async reviewToken(token: string): Promise<{ value: ReviewedUser | string; ttlMs: number }> {
    this.counters.tokenReviews += 1;
    const r = await this.o.client.create(Kinds.TokenReview, { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } } as V1TokenReview);
    const s = r.status;
    if (!s?.authenticated || !s.user?.username) return { value: s?.error || 'the token was not accepted', ttlMs: this.ttl.deniedTtlMs };
    const user: ReviewedUser = {
      username: s.user.username,
      ...(s.user.uid && { uid: s.user.uid }),
      ...(s.user.groups && { groups: s.user.groups }),
      ...(s.user.extra && { extra: s.user.extra }),
    };
    return { value: user, ttlMs: this.ttl.tokenTtlMs };
  }

  private async reviewAccess(user: ReviewedUser, path: string, verb: string): Promise<{ value: true | string; ttlMs: number }> {
    this.counters.accessReviews += 1;
    const r = await this.o.client.create(Kinds.SubjectAccessReview, {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      spec: {
        user: user.username,
        ...(user.uid && { uid: user.uid }),
        ...(user.groups && { groups: [...user.groups] }),
        ...(user.extra && { extra: Object.fromEntries(Object.entries(user.extra).map(([k, v]) => [k, [...v]])) }),
        nonResourceAttributes: { path, verb },
      },
    } as V1SubjectAccessReview);
    if (r.status?.allowed) return { value: true, ttlMs: this.ttl.allowedTtlMs };
    return { value: r.status?.reason ?? '', ttlMs: this.ttl.deniedTtlMs };
  }
}
