/**
 * DefaultPoolEnsurer: creates the AddressPool `default` from the controller's `--default-pool`
 * flag (the chart's `defaultPool` values), or adopts the one that exists, once this replica leads.
 *
 * Why the controller and not a Helm hook: the pool must pass the AddressPool webhook
 * (failurePolicy Fail), which only answers once a controller replica is Ready behind the webhook
 * Service. A post-install hook runs when the release's objects are created, long before that, so
 * `helm install` without `--wait` failed ("failed calling webhook … connect: connection refused").
 * A hook Job that retries would need a pod network — which coil itself provides only once a pool
 * exists — and hooks are run differently (or not at all) by GitOps tools. The controller is the one
 * program that knows when its webhook serves, and it retries until the API server accepts the pool.
 *
 * Adoption: an existing `default` pool (made by an earlier release's hook, or by hand) is kept;
 * subnets listed in the flag but missing from the pool are appended (subnets are append-only), in
 * the flag's order. A pool whose `blockSizeBits` differs, or whose subnets are not a prefix of the
 * flag's list, is left alone and the difference logged: the webhook would refuse the change, and an
 * admin's edit wins over a chart value.
 */
import type Logger from 'bunyan';
import { kindRule } from '../runtime/rbac.js';
import type { AddressPool, AddressPoolSpec, SubnetSet } from '../api/v2/addresspool.js';
import { DEFAULT_POOL } from '../api/v2/keys.js';
import { sleep } from '../runtime/clock.js';
import type { Client } from '../runtime/client.js';
import { ApiError } from '../runtime/errors.js';
import type { Runnable } from '../runtime/runnable.js';
import type { RbacRule } from '../runtime/registry.js';
import { Kinds } from '../api/v2/kinds.js';

/** What the ensurer needs beyond the AddressPool reconciler's rights (hack/chart-rbac.ts adds it). */
export const DEFAULT_POOL_RBAC: readonly RbacRule[] = [
  kindRule(Kinds.AddressPool, ['get', 'create', 'update']),
];

/** Options of {@link DefaultPoolEnsurer}. */
export interface DefaultPoolOptions {
  readonly client: Client;
  readonly spec: AddressPoolSpec;
  readonly logger: Logger;
  /** First retry delay (ms); doubles up to {@link maxRetryMs}. Default 500. */
  readonly retryMs?: number;
  /** Largest retry delay (ms). Default 10,000. */
  readonly maxRetryMs?: number;
}

/** What one pass did. */
export type DefaultPoolOutcome = 'created' | 'adopted' | 'appended' | 'left-alone';

const sameSubnet = (a: SubnetSet, b: SubnetSet): boolean => (a.ipv4 ?? '') === (b.ipv4 ?? '') && (a.ipv6 ?? '') === (b.ipv6 ?? '');

/**
 * What to do with an existing pool: the subnets to append, or why it is left as it is.
 * Pure, for tests.
 */
export function planAdoption(have: AddressPoolSpec, want: AddressPoolSpec): { append: SubnetSet[] } | { conflict: string } {
  if (have.blockSizeBits !== want.blockSizeBits) {
    return { conflict: `blockSizeBits is ${have.blockSizeBits}, --default-pool asks ${want.blockSizeBits} (immutable)` };
  }
  const prefix = have.subnets.every((s, i) => want.subnets[i] !== undefined && sameSubnet(s, want.subnets[i]!));
  if (!prefix) {
    return { conflict: `subnets ${JSON.stringify(have.subnets)} are not a prefix of --default-pool's ${JSON.stringify(want.subnets)} (subnets are append-only)` };
  }
  return { append: want.subnets.slice(have.subnets.length) };
}

/** A leader-only {@link Runnable}: one successful pass per leadership, then idle until stopped. */
export class DefaultPoolEnsurer implements Runnable {
  constructor(private readonly o: DefaultPoolOptions) {}

  async run(signal: AbortSignal): Promise<void> {
    let delay = this.o.retryMs ?? 500;
    for (let attempt = 1; !signal.aborted; attempt++) {
      try {
        const outcome = await this.ensureOnce();
        this.o.logger.info({ pool: DEFAULT_POOL, outcome, attempt }, 'default AddressPool ensured');
        break;
      } catch (err) {
        // Expected at install: the webhook Service has no Ready endpoint until a replica is Ready.
        this.o.logger[attempt < 5 ? 'info' : 'warn']({ err, attempt, retryInMs: delay }, 'default AddressPool not ensured yet; retrying');
        await sleep(delay, signal);
        delay = Math.min(delay * 2, this.o.maxRetryMs ?? 10_000);
      }
    }
    await new Promise<void>((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true })));
  }

  /**
   * One pass: create the pool, or adopt the existing one.
   * @throws ApiError when the API server (or the webhook behind it) refuses or cannot be reached
   */
  async ensureOnce(): Promise<DefaultPoolOutcome> {
    const { client, spec, logger } = this.o;
    const have = await client.get(Kinds.AddressPool, { name: DEFAULT_POOL });
    if (!have) {
      try {
        await client.create(Kinds.AddressPool, { apiVersion: 'coil.cybozu.com/v2', kind: 'AddressPool', metadata: { name: DEFAULT_POOL }, spec: structuredClone(spec) });
        return 'created';
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 409)) throw err;
        return this.ensureOnce(); // created meanwhile (another leader, an admin): adopt it
      }
    }
    if (have.metadata?.deletionTimestamp) throw new Error(`AddressPool ${DEFAULT_POOL} is being deleted; waiting to create it again`);
    const plan = planAdoption(have.spec, spec);
    if ('conflict' in plan) {
      logger.warn({ pool: DEFAULT_POOL, reason: plan.conflict }, 'the existing default AddressPool differs from --default-pool; left as it is');
      return 'left-alone';
    }
    if (plan.append.length === 0) return 'adopted';
    const updated: AddressPool = { ...structuredClone(have), spec: { ...have.spec, subnets: [...have.spec.subnets, ...plan.append] } };
    await client.update(Kinds.AddressPool, updated);
    return 'appended';
  }
}
