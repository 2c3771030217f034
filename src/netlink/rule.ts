/** FIB rules: the kernel's shape of a rule, and the read. */
import type { RunTarget } from './iproute2/ip-runner.js';
import type { RtReader } from './rt-request.js';

/**
 * A FIB rule (RTM_NEWRULE), the fields coil reads, named as `ip -json rule show` prints them so
 * iproute2 serves as the oracle of the rule dump.
 */
export interface Rule {
  priority: number;
  /** `all`, or the source prefix's address (its length in {@link srclen} unless a host prefix). */
  src?: string;
  /** Length of the source prefix when it is not a host prefix. */
  srclen?: number;
  /** The destination prefix's address (its length in {@link dstlen} unless a host prefix); absent: all. */
  dst?: string;
  /** Length of the destination prefix when it is not a host prefix. */
  dstlen?: number;
  /** Input interface selector. */
  iif?: string;
  /** Firewall mark selector, hex text (`0x2`), under {@link fwmask} when the mask is not all ones. */
  fwmark?: string;
  fwmask?: string;
  /** Table name (`main`, `local`) or number as a string (`"116"`). */
  table?: string;
}

/**
 * Reads one family's policy rules, as `ip -<family> -json rule show` prints them: an rtnetlink
 * dump through a NetlinkExecutor, or that command through an IpRunner.
 */
export function readRules(kernel: RtReader, target: Pick<RunTarget, 'netns'> & { family: 4 | 6 }): Promise<Rule[]> {
  return kernel.dump<Rule>({ kind: 'rules', family: target.family }, { netns: target.netns });
}
