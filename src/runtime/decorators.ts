import { injectable, type Newable } from 'inversify';
import { webhookPath } from './admission.js';
import { defaultRegistry, type Defaulter, type Reconcile, type ReconcilerOptions, type Registry, type Validator, type WebhookOptions } from './registry.js';
import type { Runnable, RunnableOptions } from './runnable.js';

/**
 * Registers a reconciler class: records `options` in a {@link Registry} (the default one unless
 * `options.registry` is given) and makes the class injectable. Nothing else happens at import;
 * the Manager binds and starts it.
 *
 * @example
 *   @Reconciler({ name: 'blockrequest', for: BlockRequest, owns: [AddressBlock], leaderOnly: true })
 *   export class BlockRequestReconciler implements Reconcile {
 *     constructor(@inject(Cache) private readonly cache: Cache, @inject(Client) private readonly client: Client) {}
 *     async reconcile(req: Request): Promise<Result> { … }
 *   }
 * @throws Error at class definition on a duplicate or invalid name
 * @see controller-runtime `builder.ControllerManagedBy(mgr).For().Owns().Watches().Named()`
 */
export function Reconciler(options: ReconcilerOptions) {
  return <C extends Newable<Reconcile>>(target: C): C => {
    const { registry, ...rest } = options;
    markInjectable(target);
    (registry ?? defaultRegistry()).addReconciler({ ...rest, target });
    return target;
  };
}

/**
 * Registers a validating admission webhook for `options.for`. The class implements
 * {@link Validator}; field errors it returns become a 422 Invalid naming every path.
 * @see controller-runtime `builder.WebhookManagedBy(mgr, T).WithValidator(v)`
 */
export function ValidatingWebhook(options: WebhookOptions) {
  return <C extends Newable<Validator<any>>>(target: C): C => {
    const { registry, ...rest } = options;
    markInjectable(target);
    (registry ?? defaultRegistry()).addWebhook({ ...rest, type: 'validating', target: target as Newable<Validator>, path: options.path ?? webhookPath('validate', options.for) });
    return target;
  };
}

/**
 * Registers a mutating (defaulting) admission webhook for `options.for`. The class implements
 * {@link Defaulter}; the runtime answers with the JSON patch from the request object to the
 * defaulted copy.
 * @see controller-runtime `builder.WebhookManagedBy(mgr, T).WithDefaulter(d)`
 */
export function MutatingWebhook(options: WebhookOptions) {
  return <C extends Newable<Defaulter<any>>>(target: C): C => {
    const { registry, ...rest } = options;
    markInjectable(target);
    (registry ?? defaultRegistry()).addWebhook({ ...rest, type: 'mutating', target: target as Newable<Defaulter>, path: options.path ?? webhookPath('mutate', options.for) });
    return target;
  };
}

/**
 * Registers a long-lived loop (a periodic GC, a route syncer): the Manager starts its `run(signal)`
 * on every replica or, with `leaderOnly` (default), on the leader only, restarts it with backoff if
 * it fails, and aborts the signal at shutdown.
 * @see controller-runtime `manager.Runnable` with `NeedLeaderElection`
 */
export function RunnableLoop(options: RunnableOptions & { readonly registry?: Registry }) {
  return <C extends Newable<Runnable>>(target: C): C => {
    const { registry, ...rest } = options;
    markInjectable(target);
    (registry ?? defaultRegistry()).addRunnable({ ...rest, target });
    return target;
  };
}

function markInjectable(target: Newable<unknown>): void {
  try {
    injectable()(target);
  } catch {
    // Already @injectable(): inversify refuses a second application, and once is enough.
  }
}
