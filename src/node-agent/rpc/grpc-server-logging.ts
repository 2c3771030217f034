/**
 * The call log of coild's gRPC server: one line per finished call, with the request context
 * Coil's `fieldExtractor` adds (pod, netns, ifname, container id) and go-grpc-middleware's
 * standard fields. The shim's process is gone by the time anyone looks, so this line is the
 * record of every CNI request.
 *
 * @see docs/compatibility.md#coild-logging-and-grpc-metrics; docs/design.md#cni-over-grpc
 */
import { ServerInterceptingCall, type ServerInterceptor, status as GrpcStatus } from '@grpc/grpc-js';
import type Logger from 'bunyan';
import { grpcCodeName, methodLabels } from './grpc-server-metrics.js';

/** CNI_ARGS keys of the pod, as Coil's constants `PodNameKey` / `PodNamespaceKey`. */
const POD_NAME_KEY = 'K8S_POD_NAME';
const POD_NAMESPACE_KEY = 'K8S_POD_NAMESPACE';

/**
 * Log level by status code, go-grpc-middleware's `DefaultServerCodeToLevel`: client mistakes
 * are info, transient trouble warn, server bugs error.
 */
function levelFor(code: number): 'info' | 'warn' | 'error' {
  switch (code) {
    case GrpcStatus.OK:
    case GrpcStatus.CANCELLED:
    case GrpcStatus.INVALID_ARGUMENT:
    case GrpcStatus.NOT_FOUND:
    case GrpcStatus.ALREADY_EXISTS:
    case GrpcStatus.UNAUTHENTICATED:
      return 'info';
    case GrpcStatus.DEADLINE_EXCEEDED:
    case GrpcStatus.PERMISSION_DENIED:
    case GrpcStatus.RESOURCE_EXHAUSTED:
    case GrpcStatus.FAILED_PRECONDITION:
    case GrpcStatus.ABORTED:
    case GrpcStatus.OUT_OF_RANGE:
    case GrpcStatus.UNAVAILABLE:
      return 'warn';
    default:
      return 'error';
  }
}

/**
 * Request context of a `CNIArgs` as proto-loader decodes it (keepCase): Coil's field names
 * (`grpc.request.pod.name`, …). Other messages (health checks) give no fields.
 */
export function requestFields(message: unknown): Record<string, string> {
  if (typeof message !== 'object' || message === null || !('container_id' in message)) return {};
  const m = message as { container_id?: string; netns?: string; ifname?: string; args?: Record<string, string> };
  const fields: Record<string, string> = {
    'grpc.request.netns': m.netns ?? '',
    'grpc.request.ifname': m.ifname ?? '',
    'grpc.request.container_id': m.container_id ?? '',
  };
  const name = m.args?.[POD_NAME_KEY];
  const namespace = m.args?.[POD_NAMESPACE_KEY];
  if (name !== undefined) fields['grpc.request.pod.name'] = name;
  if (namespace !== undefined) fields['grpc.request.pod.namespace'] = namespace;
  return fields;
}

/**
 * A grpc-js server interceptor logging each call when it finishes (never at start: one line per
 * call), with `grpc.code` in Go's spelling and `grpc.time_ms` as a float (measured when the status
 * is sent; the line itself is written just after).
 * @param logger the program's bunyan logger; a `logger: 'grpc'` child is used.
 */
export function loggingInterceptor(logger: Logger): ServerInterceptor {
  const log = logger.child({ logger: 'grpc' });
  return (descriptor, call) => {
    const { grpc_service, grpc_method } = methodLabels(descriptor.path, descriptor.requestStream, descriptor.responseStream);
    const startMs = performance.now();
    const startTime = new Date().toISOString();
    let request: Record<string, string> = {};
    return new ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMessage: (message, nextMessage) => {
            request = requestFields(message);
            nextMessage(message);
          },
        }),
      sendStatus: (status, next) => {
        const code = grpcCodeName(status.code);
        const fields = {
          'grpc.service': grpc_service,
          'grpc.method': grpc_method,
          'grpc.start_time': startTime,
          'grpc.code': code,
          'grpc.time_ms': Math.round((performance.now() - startMs) * 1000) / 1000,
          'peer.address': call.getPeer(),
          ...request,
          ...(status.code === GrpcStatus.OK ? {} : { error: status.details }),
        };
        next(status);
        // Written after the status is on its way: the line (JSON and a write(2) to stdout) cost
        // each ADD ≈ 0.1 ms before the trailers left (timestamps in coild and grpc-js, lab,
        // 2026-11-22). setImmediate runs before the loop next polls, so the line still precedes
        // any later call's.
        setImmediate(() => log[levelFor(status.code)](fields, `finished unary call with code ${code}`));
      },
    });
  };
}
