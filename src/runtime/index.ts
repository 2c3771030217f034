/**
 * The controller runtime: import everything a reconciler, webhook or program needs from here.
 * @see ./manager.ts for the wiring, ./errors.ts for the retry contract
 */
export * from './admission.js';
export * from './api-transport.js';
export * from './cache.js';
export * from './client.js';
export * from './clock.js';
export * from './controller.js';
export * from './decorators.js';
export * from './errors.js';
export * from './event-recorder.js';
export * from './http-servers.js';
export * from './informer.js';
export * from './json-patch.js';
export * from './kind.js';
export * from './leader-election.js';
export * from './logging.js';
export * from './manager.js';
export * from './metrics.js';
export * from './operator-facade.js';
export * from './registry.js';
export * from './runnable.js';
export * from './tokens.js';
export * from './webhook-config.js';
export * from './webhook-server.js';
export * from './work-queue.js';
