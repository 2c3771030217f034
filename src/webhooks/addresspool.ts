/**
 * AddressPool admission webhooks: the mutating one adds the `coil.cybozu.com` finalizer on CREATE;
 * the validating one enforces Coil's rules plus ours (family consistency, no overlap inside the
 * pool or with other pools, a bound on blockSizeBits, no host bits) with messages naming the field.
 *
 * Paths are Coil's: `/mutate-coil-cybozu-com-v2-addresspool`, `/validate-coil-cybozu-com-v2-addresspool`.
 * @see docs/compatibility.md#addresspool-webhooks, docs/compatibility.md#pool-validation-gaps
 */
import { inject } from 'inversify';
import type { AddressPool } from '../api/v2/addresspool.js';
import { findPoolOverlaps, validateAddressPoolSpec, validateAddressPoolUpdate, type NamedPoolSpec } from '../api/v2/addresspool-validation.js';
import { FIN_COIL } from '../api/v2/keys.js';
import { Kinds } from '../api/v2/kinds.js';
import { Cache } from '../runtime/cache.js';
import { MutatingWebhook, ValidatingWebhook } from '../runtime/decorators.js';
import type { Defaulter, Validator, Verdict } from '../runtime/registry.js';

/**
 * Adds the finalizer that keeps a pool until its last AddressBlock is gone
 * (docs/compatibility.md#addresspool-webhooks, docs/compatibility.md#addresspool-reconciler).
 */
@MutatingWebhook({ for: Kinds.AddressPool, operations: ['CREATE'], failurePolicy: 'Fail', sideEffects: 'None' })
export class AddressPoolDefaulter implements Defaulter<AddressPool> {
  default(obj: AddressPool): void {
    const meta = (obj.metadata ??= {});
    const finalizers = (meta.finalizers ??= []);
    if (!finalizers.includes(FIN_COIL)) finalizers.push(FIN_COIL);
  }
}

/**
 * Validates CREATE and UPDATE. Other pools are read from the informer cache; if it has not synced
 * the request is denied (asking for a retry) rather than admitted unchecked.
 * @throws Error (→ a 500 denial) when the AddressPool cache is not synced yet
 */
@ValidatingWebhook({ for: Kinds.AddressPool, operations: ['CREATE', 'UPDATE'], failurePolicy: 'Fail', sideEffects: 'None' })
export class AddressPoolValidator implements Validator<AddressPool> {
  constructor(@inject(Cache) private readonly cache: Cache) {}

  validateCreate(obj: Readonly<AddressPool>): Verdict {
    const errors = validateAddressPoolSpec(obj.spec ?? {});
    return [...errors, ...findPoolOverlaps(nameOf(obj), obj.spec ?? {}, this.otherPools())];
  }

  validateUpdate(old: Readonly<AddressPool>, obj: Readonly<AddressPool>): Verdict {
    const errors = validateAddressPoolUpdate(old.spec ?? {}, obj.spec ?? {});
    // Only appended items are checked against other pools, so overlaps Coil let in do not block growth.
    const from = old.spec?.subnets?.length ?? 0;
    return [...errors, ...findPoolOverlaps(nameOf(obj), obj.spec ?? {}, this.otherPools(), from)];
  }

  private otherPools(): NamedPoolSpec[] {
    const informer = this.cache.informer(Kinds.AddressPool);
    if (!informer.hasSynced()) throw new Error('the AddressPool cache is not synced yet; retry later');
    return informer.list().map((p) => ({ name: p.metadata?.name ?? '', spec: p.spec ?? {} }));
  }
}

function nameOf(obj: Readonly<AddressPool>): string {
  return obj.metadata?.name ?? '';
}
