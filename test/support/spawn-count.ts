/**
 * Counting the processes a piece of coil starts through the ProcessSpawner seam (the one IpRunner
 * and coild's spawn helper share): each start recorded with its argv, and the program it runs
 * named — through `nsenter --net=… -- prog` and `ip -n ns …` alike — so a test can say "no `ip`",
 * "one `nft -f -` per sync".
 */
import { basename } from 'node:path';
import { IpRunner, spawnProcess, type ProcessSpawner } from '../../src/netlink/iproute2/ip-runner.js';

/** The program argv runs: the one after `nsenter … --`, else argv[0]; its base name. */
export function programOf(argv: readonly string[]): string {
  const first = basename(argv[0] ?? '');
  if (first === 'nsenter') {
    const sep = argv.indexOf('--');
    return basename(argv[sep + 1] ?? '');
  }
  return first;
}

/** A spawner that records every start, and the IpRunner over it. */
export class SpawnCounter {
  readonly argvs: string[][] = [];
  readonly spawner: ProcessSpawner = (argv, input, timeoutMs) => {
    this.argvs.push([...argv]);
    return spawnProcess(argv, input, timeoutMs);
  };
  readonly ip = new IpRunner({ spawner: this.spawner });

  /** The starts of `program` (by {@link programOf}). */
  of(program: string): string[][] {
    return this.argvs.filter((a) => programOf(a) === program);
  }

  /** Programs started, in order (for messages). */
  programs(): string[] {
    return this.argvs.map((a) => `${programOf(a)}${a.includes('-f') ? ' -f' : ''}`);
  }

  reset(): void {
    this.argvs.length = 0;
  }
}
