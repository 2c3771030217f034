/**
 * Assembles the IPAM part of coil-controller into a fresh {@link Registry}: the AddressPool
 * webhooks and the AddressPool, BlockRequest and AddressBlock GC reconcilers, plus the container
 * bindings they need (the shared {@link PoolManager} and the {@link IpamOptions}), and how
 * AddressBlocks are cached. Used by the entrypoint and by the envtest suites, which pick only
 * the parts they test but always cache as the entrypoint does.
 */
import type { Container, Newable } from 'inversify';
import { AddressBlockGcReconciler } from '../reconcilers/addressblock-gc.js';
import { AddressPoolReconciler } from '../reconcilers/addresspool.js';
import { cachedAddressBlock } from '../reconcilers/block-indexes.js';
import { BlockRequestReconciler } from '../reconcilers/blockrequest.js';
import { cachedPod, LIVE_POD_FIELD_SELECTOR } from '../reconcilers/pod-addresses.js';
import { IpamFindingsMetrics } from '../reconcilers/ipam-findings.js';
import { Kinds } from '../api/v2/kinds.js';
import { DEFAULT_IPAM_OPTIONS, IPAM_OPTIONS, type IpamOptions } from '../reconcilers/options.js';
import { PoolManager } from '../reconcilers/pool-manager.js';
import { AddressPoolDefaulter, AddressPoolValidator } from '../webhooks/addresspool.js';
import { defaultRegistry, Registry } from '../runtime/registry.js';

/** Which IPAM parts to register; everything by default. */
export interface IpamParts {
  readonly webhooks?: boolean;
  readonly addressPool?: boolean;
  readonly blockRequest?: boolean;
  readonly gc?: boolean;
  /** `coil_controller_ipam_findings` (src/reconcilers/ipam-findings.ts). */
  readonly findingsMetrics?: boolean;
}

/**
 * Copies the chosen registrations (recorded by the decorators in the default registry) into
 * `into`, as recorded: settings a flag gives (the GC's resync period, `--gc-interval`) are read
 * by the Manager from the {@link IpamOptions} that {@link bindIpam} binds.
 * @returns `into`, for chaining
 */
export function addIpam(into: Registry, parts: IpamParts = {}): Registry {
  const want = new Set<Newable<unknown>>();
  if (parts.webhooks ?? true) want.add(AddressPoolDefaulter).add(AddressPoolValidator);
  if (parts.addressPool ?? true) want.add(AddressPoolReconciler);
  if (parts.blockRequest ?? true) want.add(BlockRequestReconciler);
  if (parts.gc ?? true) want.add(AddressBlockGcReconciler);
  if (parts.findingsMetrics ?? true) want.add(IpamFindingsMetrics);
  return into.addFrom(defaultRegistry(), want);
}

/** Binds what the IPAM reconcilers inject: one PoolManager shared by both pool-state users, and the options. */
export function bindIpam(container: Container, options: IpamOptions = DEFAULT_IPAM_OPTIONS): Container {
  container.bind(PoolManager).toSelf().inSingletonScope();
  container.bind(IPAM_OPTIONS).toConstantValue(options);
  return container;
}

/**
 * Cache settings to pass as the Manager's `cache.kinds`: AddressBlocks stored slimmed by
 * {@link cachedAddressBlock} (a fresh transform, so its shared-string table is this cache's own),
 * and live Pods reduced to their addresses and node by {@link cachedPod}.
 * Keeps 100,000 blocks within the controller's memory budget (hack/bench/blockrequest-latency.ts).
 */
export function ipamCache() {
  return [
    { kind: Kinds.AddressBlock, options: { transform: cachedAddressBlock() } },
    // Addresses and node of each live Pod, nothing more (150,000 Pods: pod-addresses.ts).
    { kind: Kinds.Pod, options: { transform: cachedPod(), fieldSelector: LIVE_POD_FIELD_SELECTOR } },
  ];
}
