#!/usr/bin/env bash
# Builds the CNI executable `coil` (src/cni-shim) as a Bun standalone executable at dist/bin/coil.
#
#   hack/build-cni.sh            # build dist/bin/coil
#   hack/build-cni.sh --bench    # also build the alternatives and time them with hyperfine
#                                # (needs `tsc -p tsconfig.json` output in dist/ and hyperfine)
#
# Why Bun: the executable runs once per pod attachment, so its start is on every pod's ADD path,
# and the target is an ADD no slower than Debian's Go ptp + host-local in the same run. A Bun
# standalone executable speaking HTTP/2 by hand and blocking libc I/O starts several times faster
# than any Node build; the figures behind every choice here and in src/cni-shim are in
# docs/performance.md#the-cni-executables-start (`--bench` below reproduces the build comparison).
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
# few loops that get warm (HPACK, varints) costs more than interpreting them
# (docs/performance.md#the-cni-executables-start).
"$BUN" build --compile --minify --bytecode --format=cjs --no-compile-autoload-dotenv --no-compile-autoload-bunfig \
  --compile-jit-policy=100 src/cni-shim/main.ts --outfile "$TMP" >/dev/null
# Not done: `--bytecode-order` laid out by a profiled ADD (BUN_BYTECODE_ORDER_OUT): within noise,
# not worth a profiling run in the build (docs/performance.md#the-cni-executables-start).
chmod 0755 "$TMP"
mv -f "$TMP" "$OUT"
echo "built $OUT ($(stat -c %s "$OUT") bytes)" >&2
# coild's netlink agent (src/netlink/socket/netlink-agent-main.ts): a script for the Bun runtime inside
# `coil` (run as `BUN_BE_BUN=1 coil netlink-agent.js`), so the image carries one runtime, not two.
AGENT=dist/bin/netlink-agent.js
"$BUN" build --target=bun --minify src/netlink/socket/netlink-agent-main.ts --outfile "$AGENT.tmp" >/dev/null
mv -f "$AGENT.tmp" "$AGENT"
echo "built $AGENT ($(stat -c %s "$AGENT") bytes)" >&2
# coild as one tree-shaken script for the same Bun runtime (`BUN_BE_BUN=1 coil main.bundle.cjs …`),
# built from tsc's output (decorator metadata as tsc emits it). One file instead of ≈ 1,450 module
# records, and only the parts of the libraries coild reaches (README, "coild's runtime").
# It sits beside main.js so that paths taken from import.meta.url (proto/, dist/bin/) hold.
# @dot-i/k8s-operator is loaded only for reconcilers/webhooks, which coild has none of; left
# external, it is still found in node_modules if that ever changes. dtrace-provider is bunyan's
# optional native module (bunyan goes on without it). Whitespace and syntax are minified (the image
# carries these files, and JavaScriptCore keeps each script's source in memory); identifiers are
# not, so a stack trace in a production log still names real functions.
[ -f dist/src/node-agent/main.js ] || { echo "missing dist/src/node-agent/main.js: run tsc -p tsconfig.json first" >&2; exit 1; }
for entry in node-agent/main egress-agent/main; do
  "$BUN" build --target=bun --format=cjs --minify-whitespace --minify-syntax --external @dot-i/k8s-operator --external dtrace-provider \
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
