/**
 * Real network namespaces for tests: `ip netns add coiltest-<random>` and a matching cleanup, so
 * tests never touch the machine's own netns. Every namespace made by one {@link TestNetnsSet} is
 * deleted by its `cleanup()`, which tests call from `after()` so it runs on failure too.
 */
import { randomBytes } from 'node:crypto';
import { IpRunner } from '../../src/netlink/iproute2/ip-runner.js';

/** A named netns under /run/netns. */
export interface TestNetns {
  /** Name, e.g. `coiltest-host-1a2b3c4d`. */
  name: string;
  /** Path to pass as a netns target, `/run/netns/<name>`. */
  path: string;
}

/** Creates and tracks test namespaces. */
export class TestNetnsSet {
  private readonly made: TestNetns[] = [];
  private readonly ip: IpRunner;

  constructor(options: { ip?: IpRunner } = {}) {
    this.ip = options.ip ?? new IpRunner();
  }

  /**
   * Creates `coiltest-<role>-<8 hex>` with `lo` up (routes via `dev lo` need it).
   * @throws NetlinkError when not root
   */
  async create(role: string): Promise<TestNetns> {
    const name = `coiltest-${role}-${randomBytes(4).toString('hex')}`;
    await this.ip.exec([this.ip.ipPath, 'netns', 'add', name]);
    const ns = { name, path: `/run/netns/${name}` };
    this.made.push(ns);
    await this.ip.batch([['link', 'set', 'dev', 'lo', 'up']], { netns: ns.path });
    return ns;
  }

  /** Deletes one namespace created here (before {@link cleanup}). @throws NetlinkError */
  async remove(ns: TestNetns): Promise<void> {
    const i = this.made.indexOf(ns);
    if (i >= 0) this.made.splice(i, 1);
    await this.ip.exec([this.ip.ipPath, 'netns', 'del', ns.name]);
  }

  /** Deletes every namespace created here (links inside go with them); never throws. */
  async cleanup(): Promise<void> {
    const all = this.made.splice(0);
    await Promise.all(all.map((ns) => this.ip.exec([this.ip.ipPath, 'netns', 'del', ns.name]).catch(() => undefined)));
  }
}

/** Why real-netns tests cannot run here, or undefined when they can (they need root). */
export function netnsSkipReason(): string | undefined {
  return process.getuid?.() === 0 ? undefined : 'real network namespace tests need root (uid 0)';
}
