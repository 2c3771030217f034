/**
 * Benchmark (not a test): a NAT pod lost under egress clients, coil's path against Coil's, in the
 * stock-kernel VM:
 *   flock /tmp/coil-vm.lock hack/fou-vm.sh -- node_modules/.bin/node dist/hack/bench/egress-failover.js
 *     [-k KIND[:RUNS],… of node-lost,graceful,scale-up,sigkill,sigstop,steady] [-n RUNS=3] [-s STREAMS=2] [-d COIL_DELAY_MS=0]
 *     [-f PROBES_DOWN_AFTER] [-m rtnetlink|ip] [--paths coil,Coil] [--family 4|6] [--k8s-not-ready-ms 1000] [--k8s-restart-ms 1000]
 *     [--k8s-readiness-fail-ms 30000] [--k8s-liveness-fail-ms =readiness] [--k8s-grace-ms 30000] [--steady-s 60] [--burn BUSY_PROCESSES=0] [-v]
 * The testbed lives in test/netns/egress-failover-bench.ts (it drives coild's and coil-egress's
 * parts, which hack/ may not import); its header says what is measured and how.
 */
import '../../test/netns/egress-failover-bench.js';
