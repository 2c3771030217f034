/**
 * The typed Coil API, group `coil.cybozu.com`, version `v2`. Pure: types, schemas, constants
 * and helpers; nothing here does I/O.
 */
export * from './keys.js';
export * from './field-error.js';
export * from './schema.js';
export * from './conditions.js';
export * from './addresspool.js';
export * from './addressblock.js';
export * from './blockrequest.js';
export * from './egress.js';
export * from './crd.js';
export * from './kinds.js';
