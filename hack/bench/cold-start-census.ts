/**
 * The scale benchmark's census after a cold start (hack/bench/scale.ts): which nodes ended with
 * more than one block, and which were served a block and ended with none without having released
 * one themselves during that cold start — the lost ones. Pure: the caller gives the blocks it listed and the releases its
 * stand-ins reported (docs/performance.md#scale).
 */

/** One release of empty blocks by a node's stand-in (its BlockReleaser), at `at` (performance.now() ms). */
export interface Release {
  readonly node: string;
  readonly at: number;
}

/** What {@link coldStartCensus} found. */
export interface ColdStartCensus {
  /** Nodes holding more than one block. */
  readonly duplicates: number;
  /** Nodes served a block that hold none and did not release one since the cold start began. */
  readonly lost: number;
  /** Nodes not served within the wait that hold no block (the cold start's "not served" counts them too): late, not lost. */
  readonly unserved: number;
  /** Nodes holding no block that released their own since the cold start began (after the grace). */
  readonly releasedOwn: number;
}

/**
 * Counts one cold start's duplicate and lost blocks.
 *
 * A node served early may have released its empty block by the census (`--block-release-grace`
 * after it arrived: the releaser's own doing): without a block, but not lost. Only releases at or
 * after `since` excuse a node: a release of an earlier phase (every node releases the empty block
 * of the cold start before, when `--controller-concurrency` runs several) says nothing about this
 * one's block.
 * A node not served within the benchmark's wait (`--alloc-timeout`) and without a block is late,
 * not lost: its request may still be answered.
 * @param nodes every node that asked for a block in this cold start
 * @param served whether the node's block reached its cache within the wait
 * @param blocksOf the number of AddressBlocks labelled with a node, as listed after the cold start
 * @param releases every release the stand-ins reported in the run, any phase
 * @param since when this cold start began (performance.now() ms)
 */
export function coldStartCensus(nodes: Iterable<string>, served: (node: string) => boolean, blocksOf: (node: string) => number, releases: readonly Release[], since: number): ColdStartCensus {
  const releasedNow = new Set(releases.filter((r) => r.at >= since).map((r) => r.node));
  let duplicates = 0;
  let lost = 0;
  let unserved = 0;
  let releasedOwn = 0;
  for (const node of nodes) {
    const held = blocksOf(node);
    if (held > 1) duplicates++;
    else if (held === 0) {
      if (releasedNow.has(node)) releasedOwn++;
      else if (!served(node)) unserved++;
      else lost++;
    }
  }
  return { duplicates, lost, unserved, releasedOwn };
}
