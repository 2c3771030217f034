/**
 * gRPC server metrics with go-grpc-prometheus' names and labels, as Coil's coild exports them,
 * so existing dashboards keep working. Unlike Coil, the handling-time histogram is on
 * (docs/compatibility.md#metrics-gaps).
 *
 * @see docs/compatibility.md#coild-logging-and-grpc-metrics,
 *   docs/compatibility.md#metric-names-and-types; go-grpc-prometheus `server_metrics.go`
 */
import { ServerInterceptingCall, type ServerInterceptor, status as GrpcStatus } from '@grpc/grpc-js';
import { Counter, Histogram, type Registry } from 'prom-client';

/** Go's `codes.Code.String()` for each gRPC status: the `grpc_code` label values. */
const CODE_NAMES: Record<number, string> = {
  [GrpcStatus.OK]: 'OK',
  [GrpcStatus.CANCELLED]: 'Canceled',
  [GrpcStatus.UNKNOWN]: 'Unknown',
  [GrpcStatus.INVALID_ARGUMENT]: 'InvalidArgument',
  [GrpcStatus.DEADLINE_EXCEEDED]: 'DeadlineExceeded',
  [GrpcStatus.NOT_FOUND]: 'NotFound',
  [GrpcStatus.ALREADY_EXISTS]: 'AlreadyExists',
  [GrpcStatus.PERMISSION_DENIED]: 'PermissionDenied',
  [GrpcStatus.RESOURCE_EXHAUSTED]: 'ResourceExhausted',
  [GrpcStatus.FAILED_PRECONDITION]: 'FailedPrecondition',
  [GrpcStatus.ABORTED]: 'Aborted',
  [GrpcStatus.OUT_OF_RANGE]: 'OutOfRange',
  [GrpcStatus.UNIMPLEMENTED]: 'Unimplemented',
  [GrpcStatus.INTERNAL]: 'Internal',
  [GrpcStatus.UNAVAILABLE]: 'Unavailable',
  [GrpcStatus.DATA_LOSS]: 'DataLoss',
  [GrpcStatus.UNAUTHENTICATED]: 'Unauthenticated',
};

/** The `grpc_code` label value of a numeric gRPC status (Go's spelling, e.g. `InvalidArgument`). */
export function grpcCodeName(code: number): string {
  return CODE_NAMES[code] ?? `Code(${code})`;
}

/** Service, method and type of a call path such as `/pkg.cnirpc.CNI/Add`. */
export interface GrpcMethodLabels {
  grpc_type: 'unary' | 'client_stream' | 'server_stream' | 'bidi_stream';
  grpc_service: string;
  grpc_method: string;
}

/** Splits a method path into go-grpc-prometheus labels. */
export function methodLabels(path: string, requestStream: boolean, responseStream: boolean): GrpcMethodLabels {
  const [, service = '', method = ''] = /^\/([^/]*)\/([^/]*)$/.exec(path) ?? [];
  const grpcType = requestStream
    ? responseStream
      ? 'bidi_stream'
      : 'client_stream'
    : responseStream
      ? 'server_stream'
      : 'unary';
  return { grpc_type: grpcType, grpc_service: service, grpc_method: method };
}

/** Prometheus' DefBuckets (seconds), go-grpc-prometheus' default for the histogram. */
const HANDLING_BUCKETS_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const LABELS = ['grpc_type', 'grpc_service', 'grpc_method'] as const;

/** The five server metrics, registered on one caller-owned registry. */
export class GrpcServerMetrics {
  readonly started: Counter<(typeof LABELS)[number]>;
  readonly handled: Counter<(typeof LABELS)[number] | 'grpc_code'>;
  readonly msgReceived: Counter<(typeof LABELS)[number]>;
  readonly msgSent: Counter<(typeof LABELS)[number]>;
  readonly handlingSeconds: Histogram<(typeof LABELS)[number]>;

  /**
   * @param registry the program's prom-client registry (never the global one).
   * @throws Error from prom-client when the registry already holds these names.
   */
  constructor(registry: Registry) {
    const registers = [registry];
    this.started = new Counter({
      name: 'grpc_server_started_total',
      help: 'Total number of RPCs started on the server.',
      labelNames: LABELS,
      registers,
    });
    this.handled = new Counter({
      name: 'grpc_server_handled_total',
      help: 'Total number of RPCs completed on the server, regardless of success or failure.',
      labelNames: [...LABELS, 'grpc_code'],
      registers,
    });
    this.msgReceived = new Counter({
      name: 'grpc_server_msg_received_total',
      help: 'Total number of RPC stream messages received on the server.',
      labelNames: LABELS,
      registers,
    });
    this.msgSent = new Counter({
      name: 'grpc_server_msg_sent_total',
      help: 'Total number of gRPC stream messages sent by the server.',
      labelNames: LABELS,
      registers,
    });
    this.handlingSeconds = new Histogram({
      name: 'grpc_server_handling_seconds',
      help: 'Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.',
      labelNames: LABELS,
      buckets: HANDLING_BUCKETS_SECONDS,
      registers,
    });
  }

  /**
   * Zeroes the counters of each method, as go-grpc-prometheus' `InitializeMetrics` does, so
   * rate() queries see a series before the first call.
   */
  initialize(methods: readonly GrpcMethodLabels[]): void {
    for (const m of methods) {
      this.started.inc(m, 0);
      this.msgReceived.inc(m, 0);
      this.msgSent.inc(m, 0);
    }
  }

  /** A grpc-js server interceptor that counts every call and times it from start to status. */
  interceptor(): ServerInterceptor {
    return (descriptor, call) => {
      const labels = methodLabels(descriptor.path, descriptor.requestStream, descriptor.responseStream);
      const startNs = process.hrtime.bigint();
      this.started.inc(labels);
      return new ServerInterceptingCall(call, {
        start: (next) =>
          next({
            onReceiveMessage: (message, nextMessage) => {
              this.msgReceived.inc(labels);
              nextMessage(message);
            },
          }),
        sendMessage: (message, next) => {
          this.msgSent.inc(labels);
          next(message);
        },
        sendStatus: (status, next) => {
          this.handled.inc({ ...labels, grpc_code: grpcCodeName(status.code) });
          this.handlingSeconds.observe(labels, Number(process.hrtime.bigint() - startNs) / 1e9);
          next(status);
        },
      });
    };
  }
}
