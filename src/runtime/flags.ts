/**
 * Command-line value parsing shared by every coil program (coil-controller, coild, coil-egress,
 * coil-migrator): Go-style durations and bind addresses, as Coil's cobra/pflag flags take them,
 * and the one error class a bad value raises.
 */
import { NETFILTER_BACKENDS, type NetfilterBackend } from '../api/v2/keys.js';
import type { BindAddress } from './http-servers.js';

/** A flag or environment value that cannot be used; the message names it. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

const DURATION_UNITS_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/**
 * Parses a Go-style duration: `1h`, `5m`, `30s`, `1h30m`, `250ms`, `1.5s`, `0`.
 * @param flag flag name (without dashes) to prefix the error message with, e.g. `etcd-timeout`
 * @returns milliseconds (rounded)
 * @throws ConfigError on anything else
 */
export function parseDuration(text: string, flag?: string): number {
  if (text === '0') return 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let total = 0;
  let end = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    total += Number(m[1]) * DURATION_UNITS_MS[m[2]!]!;
    end = re.lastIndex;
  }
  if (end === 0 || end !== text.length) {
    throw new ConfigError(`${flag ? `--${flag}: ` : ''}invalid duration ${JSON.stringify(text)} (use e.g. 1h, 5m, 30s, 250ms)`);
  }
  return Math.round(total);
}

/**
 * Parses a listen address `host:port`, `:port` (all interfaces) or `[v6]:port`; `0` or empty
 * means disabled (controller-runtime's convention for metrics and probe addresses).
 * @throws ConfigError on a bad port
 */
export function parseBindAddress(text: string): BindAddress | undefined {
  if (text === '' || text === '0') return undefined;
  const colon = text.lastIndexOf(':');
  const host = colon > 0 ? text.slice(0, colon).replace(/^\[|\]$/g, '') : '0.0.0.0';
  const port = Number(colon >= 0 ? text.slice(colon + 1) : text);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(`invalid address ${JSON.stringify(text)}`);
  return { host, port };
}

/**
 * Parses `--backend` as Coil's programs take it: `iptables` or `nftables`.
 * @throws ConfigError naming the flag and the accepted values on anything else
 */
export function parseBackend(text: string): NetfilterBackend {
  if ((NETFILTER_BACKENDS as readonly string[]).includes(text)) return text as NetfilterBackend;
  throw new ConfigError(`--backend: expected ${NETFILTER_BACKENDS.map((b) => JSON.stringify(b)).join(' or ')}, got ${JSON.stringify(text)}`);
}
