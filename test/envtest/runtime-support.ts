/**
 * Shared pieces of the runtime envtest suites: small sample CRDs (kinds of a test group, not
 * Coil's), a Manager factory wired for tests (random ports, fast informer retries), and a
 * Prometheus text scraper.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import bunyan from 'bunyan';
import { Manager, type ManagerOptions } from '../../src/runtime/manager.js';
import { defineKind, type KindDescriptor } from '../../src/runtime/kind.js';
import { createLogger, serializeError, silentLogger, type Logger } from '../../src/runtime/logging.js';
import type { Registry } from '../../src/runtime/registry.js';
import type { ControlPlane } from './control-plane.js';

/** API group of the sample kinds. */
export const GROUP = 'runtime.test.coil.example';

/** A sample object: free-form spec and status. */
export interface Sample extends KubernetesObject {
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

/** A namespaced sample kind with a status subresource. */
export function sampleKind(kind: string): KindDescriptor<Sample> {
  return defineKind<Sample>({ group: GROUP, version: 'v1', kind, plural: `${kind.toLowerCase()}s`, namespaced: true });
}

/** The CRD of a {@link sampleKind}: spec/status accept anything, status is a subresource. */
export function sampleCrd(kind: KindDescriptor): object {
  const free = { type: 'object', 'x-kubernetes-preserve-unknown-fields': true };
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${kind.plural}.${kind.group}` },
    spec: {
      group: kind.group,
      scope: kind.namespaced ? 'Namespaced' : 'Cluster',
      names: { kind: kind.kind, plural: kind.plural, singular: kind.kind.toLowerCase(), listKind: `${kind.kind}List` },
      versions: [{ name: kind.version, served: true, storage: true, subresources: { status: {} }, schema: { openAPIV3Schema: { type: 'object', properties: { spec: free, status: free } } } }],
    },
  };
}

/** Test logs: silent unless COIL_TEST_LOG names a bunyan level (e.g. `debug`). */
export function testLogger(name: string): Logger {
  const level = process.env.COIL_TEST_LOG;
  return level ? createLogger({ name, level: level as 'debug' }) : silentLogger(name);
}

/** One bunyan record as {@link recordingLogger} keeps it. */
export interface LogRecord {
  level: number;
  msg: string;
  err?: { message?: string; code?: number; reason?: string };
  [field: string]: unknown;
}

/**
 * A logger that keeps every record from debug up (and prints them too when COIL_TEST_LOG is set,
 * as {@link testLogger}), so a test can assert on what a component logged and show its warnings
 * when it fails.
 */
export function recordingLogger(name: string): { logger: Logger; records: LogRecord[]; warnings: () => string } {
  const ring = new bunyan.RingBuffer({ limit: 100_000 });
  const records = ring.records as LogRecord[];
  const level = process.env.COIL_TEST_LOG;
  const streams: bunyan.Stream[] = [{ type: 'raw', level: 'debug', stream: ring }];
  if (level) streams.push({ level: level as bunyan.LogLevel, stream: process.stderr });
  const logger = bunyan.createLogger({ name, streams, serializers: { err: serializeError } });
  const warnings = (): string => records.filter((r) => r.level >= bunyan.WARN)
    .map((r) => `${bunyan.nameFromLevel[r.level]} ${r.msg}${r.err ? `: ${r.err.message}` : ''}`).join('\n') || '(none)';
  return { logger, records, warnings };
}

/**
 * A Manager on `registry` against `cp`: metrics and probes on one random 127.0.0.1 port, no
 * default process metrics, informer retries capped at 2 s so apiserver restarts are caught
 * quickly, 5 s graceful shutdown.
 */
export function testManager(cp: ControlPlane, registry: Registry, extra: Partial<ManagerOptions> = {}): Manager {
  const bind = { host: '127.0.0.1', port: 0 };
  return new Manager({
    kubeConfig: cp.kubeConfig,
    registry,
    name: 'runtime-test',
    logger: testLogger(extra.identity ?? 'runtime-test'),
    metricsBindAddress: bind,
    healthProbeBindAddress: bind,
    defaultMetrics: false,
    gracefulShutdownTimeoutMs: 5_000,
    cache: { defaults: { initialBackoffMs: 100, maxBackoffMs: 2_000 } },
    ...extra,
  });
}

/** One sample of a Prometheus text exposition. */
export interface MetricSample {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly value: number;
}

/** Fetches and parses `/metrics` (names, labels, values; comments skipped). */
export async function scrape(port: number): Promise<MetricSample[]> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => {
      const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(l);
      if (!m) throw new Error(`unparsable metric line: ${l}`);
      const labels: Record<string, string> = {};
      for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k!] = v!;
      return { name: m[1]!, labels, value: Number(m[3]) };
    });
}

/** Sum of the samples named `name` whose labels include `labels`. */
export function metricValue(samples: readonly MetricSample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const hits = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return hits.length ? hits.reduce((a, s) => a + s.value, 0) : undefined;
}

/** Creates a namespace (the apiserver alone never deletes them; names must be unique per plane). */
export async function createNamespace(cp: ControlPlane, name: string): Promise<void> {
  const res = await cp.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  if (res.status !== 201 && res.status !== 409) throw new Error(`create namespace ${name}: ${res.status} ${res.body}`);
}
