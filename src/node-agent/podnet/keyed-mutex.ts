/**
 * Per-key mutual exclusion for coild's CNI calls: ADD, DEL, CHECK and GC of one
 * `<containerID>:<ifname>` run one after another, while different keys run in parallel. Coil
 * serialised every ADD on one global mutex until 2.15 and stalled nodes for minutes (Coil #368);
 * its fix hashes keys onto 128 mutexes, so unrelated pods still queue behind each other. Here each
 * key gets its own queue, dropped when idle, so memory is O(keys in flight).
 */

/**
 * A map of FIFO locks keyed by string. Not reentrant: a holder that asks for its own key again
 * waits forever.
 */
export class KeyedMutex {
  /** key → tail of that key's queue; absent when nobody holds or waits for the key. */
  private readonly tails = new Map<string, Promise<void>>();

  /**
   * Runs `fn` once every earlier holder of `key` has finished (whether it resolved or threw).
   * @returns what `fn` returns; rethrows what it throws
   */
  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    await previous;
    try {
      return await fn();
    } finally {
      release();
      // Only the last in line forgets the key; a later arrival has replaced the tail.
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }

  /** Whether some call holds or waits for `key` (GC skips keys with an ADD in flight). */
  isBusy(key: string): boolean {
    return this.tails.has(key);
  }

  /** Number of keys held or waited for. */
  get size(): number {
    return this.tails.size;
  }
}
