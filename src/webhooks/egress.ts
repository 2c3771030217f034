/**
 * Egress admission webhooks: the mutating one inserts the `egress` container into a template
 * without containers (CREATE, as Coil); the validating one enforces Coil's rules plus ours on
 * CREATE and UPDATE (Coil has no immutable Egress field) with messages naming the field, and
 * warns about template fields the reconciler overrides.
 *
 * Paths are Coil's: `/mutate-coil-cybozu-com-v2-egress`, `/validate-coil-cybozu-com-v2-egress`.
 * Both are pure (no cache read), but they do not answer before the controller's caches have
 * synced: until then the webhook server denies every request, theirs too, with 503 and a retry
 * hint (`notReadyReason` in src/runtime/webhook-server.ts, set by the Manager).
 * @see docs/compatibility.md#egress-webhooks
 */
import type { Egress } from '../api/v2/egress.js';
import { defaultEgress, egressWarnings, validateEgressSpec } from '../api/v2/egress-validation.js';
import { Kinds } from '../api/v2/kinds.js';
import { MutatingWebhook, ValidatingWebhook } from '../runtime/decorators.js';
import type { Defaulter, Validator, Verdict } from '../runtime/registry.js';

/**
 * Inserts `{name: egress}` when `spec.template` has no container
 * (docs/compatibility.md#egress-webhooks).
 */
@MutatingWebhook({ for: Kinds.Egress, operations: ['CREATE'], failurePolicy: 'Fail', sideEffects: 'None' })
export class EgressDefaulter implements Defaulter<Egress> {
  default(obj: Egress): void {
    defaultEgress(obj);
  }
}

/** Validates CREATE and UPDATE with the same rules; see {@link validateEgressSpec}. */
@ValidatingWebhook({ for: Kinds.Egress, operations: ['CREATE', 'UPDATE'], failurePolicy: 'Fail', sideEffects: 'None' })
export class EgressValidator implements Validator<Egress> {
  validateCreate(obj: Readonly<Egress>): Verdict {
    return verdict(obj);
  }

  validateUpdate(_old: Readonly<Egress>, obj: Readonly<Egress>): Verdict {
    return verdict(obj);
  }
}

function verdict(obj: Readonly<Egress>): Verdict {
  const spec = obj.spec ?? { destinations: [], replicas: 1, sessionAffinity: 'ClientIP' };
  return { errors: validateEgressSpec(spec), warnings: egressWarnings(spec) };
}
