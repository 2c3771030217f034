#!/usr/bin/env bash
# Builds the CNI executable `coil` (src/cni-shim) as a Bun standalone executable at dist/bin/coil.
#
#   hack/build-cni.sh            # build dist/bin/coil
#   hack/build-cni.sh --bench    # also build the alternatives and time them with hyperfine
#                                # (needs `tsc -p tsconfig.json` output in dist/ and hyperfine)
#
# Why Bun: the executable runs once per pod attachment, so its start is on every pod's ADD path,
# and the target is ADD ≤ Debian's Go ptp+host-local (p50 ≈ 9–12 ms here in hack/bench/cni-add.ts; ≈ 20 ms in
# cni-baseline.md §2, measured on a busier host).
# Measured 2026-11-22 03:35 UTC with `RUNS=50 hack/build-cni.sh --bench` (hyperfine, warm-up 5; a
# trivial handler behind the real grpc-js server; 2 shared vCPUs, load 1.2–1.7, so compare rows
# within one run):
#
#   option                                              ADD mean / median    VERSION median   size
#   (b) bun build --compile --bytecode, hand HTTP/2     13.9 ± 1.3 / 14.2 ms      7.3 ms      111 MB, one file (gzip 52 MB)
#   (a) Node 24 esbuild bundle + enableCompileCache     62.2 ± 23.7 / 56.7 ms    43.2 ms      12 KB + a Node binary on the host
#   (c) Node 24 grpc-js + proto-loader client          161.2 ± 26.4 / 158.8 ms    -           node_modules
#   earlier run: (b) with node:http2 instead of the hand client ≈ 50 ms ADD, 33 ms VERSION
#   for scale: a Bun hello-world executable ≈ 4–6 ms; `node -e 0` ≈ 34 ms
#
# What the numbers taught (each cost is per start, inside the Bun executable):
#   import 'node:http2' ≈ 17 ms, touching process.stdout ≈ 15 ms, import 'node:net' ≈ 8 ms,
#   import 'node:fs' ≈ 2 ms; Bun.connect, Bun.stdin and Bun.write ≈ 0. Hence the shim speaks
#   HTTP/2 + HPACK itself (src/cni-shim/grpc-client.ts, hpack.ts) and uses Bun's I/O when present
#   (unix-socket.ts, stdio.ts); under Node the same code falls back to node:net / node:fs.
#   Later (2026-11-22 09:10 UTC): Bun.stdin starts three threads to read a netconf (≈ 0.7–1 ms) and
#   Bun.connect takes ≈ 0.5 ms, against ≈ 0.65 ms once for loading bun:ffi and binding read, write,
#   socket, connect and poll (≈ 0.2 ms through the native Bun.FFI that bun:ffi wraps), then
#   microseconds per call. So the shim now does blocking libc I/O (src/cni-shim/libc.ts);
#   interleaved A/B against the stand-in below, 200 runs: ADD p50 −1.2 to −1.8 ms; in cni-add.js's
#   lab, −0.7 to −1.0 ms. COIL_SHIM_NO_FFI=1 selects Bun's I/O again.
#   Caveat for any comparison of builds: the same executable runs ≈ 1.8 ms slower from an older
#   page-cache copy than from a fresh one (same bytes; system time 5.3 vs 3.7 ms per run here, same
#   number of page faults), so A/B runs compare copies written at the same time.
#   In a one-shot JavaScriptCore process the first call of a builtin written in JavaScript costs
#   tens of µs (Buffer.from 0.1–0.2 ms, Array.prototype.map 0.12 ms, a regexp 0.06 ms), so the
#   shim's ADD path uses loops, TextEncoder and written-out tables (src/cni-shim/parse.ts notes it).
# Where an ADD's ≈ 9.5 ms go in cni-add.js's lab (2026-11-22 10:00 UTC, timestamps of every process
# on one clock): Bun runtime start and exit ≈ 3.5 ms, the shim's JavaScript ≈ 1.2 ms, grpc-js in
# coild from accept to trailers ≈ 1.2 ms, coild's handler ≈ 0.3 ms, the netlink agent and the
# kernel ≈ 1.4 ms (the veth pair ≈ 0.3 ms of it). The size is Bun's runtime, not our code (the
# bundle is ≈ 20 KB).
# Later the same day (11:00–11:50 UTC), with stage timestamps in the shim (Bun.nanoseconds) and A/B
# runs of copies written together:
#   - A function that merely names `Buffer` costs ≈ 0.1 ms the first time it runs (the runtime sets
#     Buffer up then); `process` and `performance` cost tens of µs the same way. The libc path names
#     none of them: bytes are Uint8Arrays (src/cni-shim/bytes.ts), env comes from Bun.env, the exit
#     is _exit(2), the deadline is Date.now().
#   - With libc the shim runs synchronously from stdin to exit: no promise, timer or event-loop turn.
#   - The shim announces HPACK table size 0 and decodes only the response fields it reads.
#   - Together, against the stand-in, paired A/B with the build of 10:42 UTC (300 runs): ADD −0.61 ms,
#     STATUS −0.56 ms per run.
#   - What is left of the shim's JavaScript (≈ 1.1 ms) is JavaScriptCore's first-call cost spread over
#     everything: the first instance of any class ≈ 40 µs, TypedArray#set/subarray ≈ 20 µs, JSON
#     ≈ 25 µs. A hand-written floor (the request pre-encoded, no checks, no HPACK) runs ≈ 1.1 ms faster
#     (paired A/B, 300 runs).
#   - The jit policy below also reached the netlink agent (it runs inside this executable) until it
#     reset it: see src/netlink/netlink-agent-main.ts.
set -euo pipefail
cd "$(dirname "$0")/.."

BUN=${BUN:-node_modules/@oven/bun-linux-x64/bin/bun}
OUT=dist/bin/coil
[ -x "$BUN" ] || { echo "missing $BUN (devDependency @oven/bun-linux-x64)" >&2; exit 1; }

mkdir -p dist/bin
# Build beside the target and rename, so a concurrent reader never sees a half-written file.
TMP=$(mktemp dist/bin/.coil.XXXXXX)
trap 'rm -f "$TMP"' EXIT

# --bytecode needs CommonJS output; main.ts avoids top-level await for that reason.
# No autoloading of .env or bunfig.toml: kubelet's working directory must not change the plugin.
# --compile-jit-policy=100 raises JSC's tier-up thresholds: a run lasts a few ms, and compiling the
# few loops that get warm (HPACK, varints) costs more than interpreting them. Interleaved A/B, 150
# ADDs each against a trivial coild stand-in (2026-11-22 07:22 UTC, load 1.2): policy 1 (default)
# p50 13.65 ms → 100: 11.68 ms; 10: −2.3 ms, 1000: −2.4 ms (the same within noise).
"$BUN" build --compile --minify --bytecode --format=cjs --no-compile-autoload-dotenv --no-compile-autoload-bunfig \
  --compile-jit-policy=100 src/cni-shim/main.ts --outfile "$TMP" >/dev/null
# Not done: `--bytecode-order` laid out by a profiled ADD (BUN_BYTECODE_ORDER_OUT). Interleaved
# A/B runs against the stand-in (2026-11-22 09:30–09:40 UTC) ranged from −0.23 to +0.09 ms
# p50, not enough to add a profiling run to the build.
chmod 0755 "$TMP"
mv -f "$TMP" "$OUT"
echo "built $OUT ($(stat -c %s "$OUT") bytes)" >&2
# coild's netlink agent (src/netlink/netlink-agent-main.ts): a script for the Bun runtime inside
# `coil` (run as `BUN_BE_BUN=1 coil netlink-agent.js`), so the image carries one runtime, not two.
AGENT=dist/bin/netlink-agent.js
"$BUN" build --target=bun --minify src/netlink/netlink-agent-main.ts --outfile "$AGENT.tmp" >/dev/null
mv -f "$AGENT.tmp" "$AGENT"
echo "built $AGENT ($(stat -c %s "$AGENT") bytes)" >&2
# coild as one tree-shaken script for the same Bun runtime (`BUN_BE_BUN=1 coil main.bundle.cjs …`),
# built from tsc's output (decorator metadata as tsc emits it). One file instead of ≈ 1,450 module
# records, and only the parts of the libraries coild reaches (README, "coild's runtime").
# It sits beside main.js so that paths taken from import.meta.url (proto/, dist/bin/) hold.
# @dot-i/k8s-operator is loaded only for reconcilers/webhooks, which coild has none of; left
# external, it is still found in node_modules if that ever changes. dtrace-provider is bunyan's
# optional native module (bunyan goes on without it).
[ -f dist/src/node-agent/main.js ] || { echo "missing dist/src/node-agent/main.js: run tsc -p tsconfig.json first" >&2; exit 1; }
for entry in node-agent/main egress-agent/main; do
  "$BUN" build --target=bun --format=cjs --external @dot-i/k8s-operator --external dtrace-provider \
    "dist/src/$entry.js" --outfile "dist/src/$entry.bundle.cjs.tmp" >/dev/null
  mv -f "dist/src/$entry.bundle.cjs.tmp" "dist/src/$entry.bundle.cjs"
  echo "built dist/src/$entry.bundle.cjs ($(stat -c %s "dist/src/$entry.bundle.cjs") bytes)" >&2
done

[ "${1:-}" = --bench ] || exit 0

# ---------------------------------------------------------------- --bench
command -v hyperfine >/dev/null || { echo "--bench needs hyperfine (apt-get install -y hyperfine)" >&2; exit 1; }
NODE=node_modules/.bin/node
STAND_IN=dist/test/support/coild-stand-in.js
W=$(mktemp -d /tmp/coil-bench.XXXXXX)
SERVER_PID=""
trap 'rm -f "$TMP"; [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$W"' EXIT
# coild stand-in (test/support/coild-stand-in.ts): the real gRPC server with a handler that answers at once.
start_stand_in() {
  [ -f "$STAND_IN" ] || return 1
  mkfifo "$W/stand-in.in"
  "$NODE" "$STAND_IN" "$W/coild.sock" < "$W/stand-in.in" > "$W/stand-in.out" & SERVER_PID=$!
  exec 9> "$W/stand-in.in" # the stand-in stops when this closes (or on SIGTERM from the trap)
  for _ in $(seq 100); do grep -q ready "$W/stand-in.out" 2>/dev/null && return 0; sleep 0.05; done
  echo "coild stand-in did not start" >&2
  return 1
}
printf '{"cniVersion":"1.1.0","name":"k8s-pod-network","type":"coil","socket":"%s"}\n' "$W/coild.sock" > "$W/netconf.json"
export CNI_CONTAINERID=0123456789abcdef CNI_NETNS=/var/run/netns/x CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin \
  CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-1;K8S_POD_INFRA_CONTAINER_ID=0123456789abcdef"
start_stand_in || { echo "--bench needs tsc output ($STAND_IN)" >&2; exit 1; }
export CNI_COMMAND=ADD

# (a) Node bundle, started through a wrapper that enables the compile cache before loading it.
node_modules/esbuild/bin/esbuild src/cni-shim/main.ts --bundle --platform=node --format=esm --target=node24 \
  --minify --log-level=warning --outfile="$W/coil.bundle.mjs"
printf '#!%s\nimport module from "node:module";\nmodule.enableCompileCache?.();\nawait import("./coil.bundle.mjs");\n' \
  "$PWD/$NODE" > "$W/coil-node"
chmod +x "$W/coil-node"
# (c) the same ADD call through grpc-js, the way the daemon side would do it.
cat > "$W/grpcjs-client.mjs" <<EOF
import module from 'node:module';
module.enableCompileCache?.();
import { readFileSync } from 'node:fs';
const grpc = await import('$PWD/node_modules/@grpc/grpc-js/build/src/index.js');
const pl = await import('$PWD/node_modules/@grpc/proto-loader/build/src/index.js');
const def = pl.loadSync('cnirpc.proto', { keepCase: true, includeDirs: ['$PWD/proto'] });
const CNI = grpc.loadPackageDefinition(def).pkg.cnirpc.CNI;
const c = new CNI('unix:$W/coild.sock', grpc.credentials.createInsecure());
c.Add({ container_id: process.env.CNI_CONTAINERID, netns: process.env.CNI_NETNS, ifname: 'eth0', stdin_data: readFileSync(0) },
  { deadline: Date.now() + 60000 }, (err, res) => { process.stdout.write(res.result.toString() + '\n'); c.close(); });
EOF
"$OUT" < "$W/netconf.json" >/dev/null || { echo "coil ADD failed" >&2; exit 1; }
hyperfine --warmup 5 --runs "${RUNS:-40}" --export-json "$W/bench.json" \
  -n '(b) bun executable ADD' "$OUT < $W/netconf.json" \
  -n '(a) node bundle + compile cache ADD' "$W/coil-node < $W/netconf.json" \
  -n '(c) node grpc-js client ADD' "$NODE $W/grpcjs-client.mjs < $W/netconf.json" \
  -n '(b) bun executable VERSION' "CNI_COMMAND=VERSION $OUT < $W/netconf.json" \
  -n '(a) node bundle VERSION' "CNI_COMMAND=VERSION $W/coil-node < $W/netconf.json" >/dev/null
"$NODE" -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).results;
  for (const x of r) console.log(`${x.command.padEnd(40)} mean ${(x.mean * 1e3).toFixed(1)} ± ${(x.stddev * 1e3).toFixed(1)} ms, median ${(x.median * 1e3).toFixed(1)} ms`);
' "$W/bench.json"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
