/**
 * Injection tokens for runtime services that are not classes. Class services (Cache, Client,
 * EventRecorder, Metrics, OperatorFacade) are their own tokens: `@inject(Cache) cache: Cache`.
 * Symbols are `Symbol.for` so two copies of this module (tests, bundles) agree.
 */
export const TOKENS = Object.freeze({
  /** The root bunyan logger. */
  Logger: Symbol.for('coil.runtime.Logger'),
  /** The Manager itself (for runnables that need `isLeader()`). */
  Manager: Symbol.for('coil.runtime.Manager'),
});
