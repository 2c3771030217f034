/**
 * The IPAM domain model: CIDR arithmetic, pool layout and block choice, address allocation inside
 * a block, and the invariants. Pure: no I/O, no clock, no logger, no module state; callers pass `nowMs`.
 *
 * @see docs/design.md#the-ipam-model-is-pure
 */
export * from './cidr.js';
export * from './pool.js';
export * from './block.js';
export * from './invariants.js';
