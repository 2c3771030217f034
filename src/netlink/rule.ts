/** `ip rule`: batch-line builders and the JSON read. */
import type { BatchLine, IpRunner, RunTarget } from './ip-runner.js';

/** One entry of `ip -json rule show`. */
export interface IpRule {
  priority: number;
  /** `all` or a CIDR. */
  src?: string;
  /** Table name (`main`, `local`) or number as a string (`"116"`). */
  table?: string;
}

/** Options of {@link rule.add}. */
export interface RuleOptions {
  priority: number;
  table: number;
}

/** Builders of `ip rule` batch lines. */
export const rule = {
  /**
   * `rule add prio P lookup T`. The family is the batch's (`family` of {@link IpRunner.batch}):
   * iproute2 ignores the family of a zero-length `from ::/0`, so it cannot be given per line.
   */
  add(o: RuleOptions): BatchLine {
    return ['rule', 'add', 'prio', String(o.priority), 'lookup', String(o.table)];
  },
  /** `rule del prio P lookup T` (family: the batch's). */
  del(o: RuleOptions): BatchLine {
    return ['rule', 'del', 'prio', String(o.priority), 'lookup', String(o.table)];
  },
} as const;

/** Reads one family's policy rules with `ip -<family> -json rule show`. */
export function readRules(ip: IpRunner, target: RunTarget & { family: 4 | 6 }): Promise<IpRule[]> {
  return ip.json<IpRule[]>(['rule', 'show'], target);
}
