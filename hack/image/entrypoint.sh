#!/bin/sh
# Dispatches on the name it was called by (coil-controller, coild, coil-egress, coil-install-cni,
# coil-migrator, kubectl-coil, kubectl-coil-linux-amd64). COIL_ROOT (default /opt/coil, where the
# Dockerfile puts dist/) lets the benchmark run this very script from a checkout
# (hack/bench/blockrequest-latency.ts).
#
# coild and coil-egress run on every node and in every NAT pod, so they run on the Bun runtime
# inside the `coil` executable (`BUN_BE_BUN=1`), each as one CommonJS bundle built by
# hack/build-cni.sh: one process, no netlink agent, about half of Node's memory (README, "Design:
# coild's runtime"). --no-install: Bun must never fetch a missing package at run time. The
# controller (one per cluster), the installer and the migrator run on Node.
set -e
root="${COIL_ROOT:-/opt/coil}"
node_flags=""
bundle=""
case "$(basename "$0")" in
  coil-controller)
    main=dist/src/controller/main.js
    # Memory: the controller caches every AddressBlock (100,000 in a large cluster). Node's
    # defaults let the heap run far ahead of what is live — 16 MB semi-spaces, and an old space
    # grown well past the live size before the next full GC. With 100,000 blocks (measured by
    # hack/bench/blockrequest-latency.ts): RSS about 430 MB with the defaults, 180-190 MB
    # (peak 215 MB, also through a full relist) with these. No --max-old-space-size: a cap would
    # only turn a bigger cluster into a crash loop, while these keep the heap near its live size.
    # They must be node arguments: NODE_OPTIONS refuses --optimize-for-size.
    #   --max-semi-space-size=2  young generation of 2 MB semi-spaces (scavenges stay cheap)
    #   --optimize-for-size      V8 favours memory over speed: slower heap growth, smaller caches
    node_flags="--max-semi-space-size=2 --optimize-for-size"
    # glibc makes up to 8 malloc arenas per core for node's threads; 2 hold what it needs.
    export MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}"
    ;;
  coild)            bundle=dist/src/node-agent/main.bundle.cjs ;;
  coil-egress)      bundle=dist/src/egress-agent/main.bundle.cjs ;;
  coil-install-cni) main=dist/src/cni-installer/main.js ;;
  coil-migrator)    main=dist/src/migrator/main.js ;;
  # The admin's kubectl plugin as one ES module (hack/kubectl-coil/build.ts), on the Bun runtime
  # inside coil: `kubectl -n kube-system exec ds/coild -- kubectl-coil …` runs it in the cluster.
  kubectl-coil)     bundle=kubectl-coil.js ;;
  # The same plugin as a self-contained linux/amd64 executable, written to stdout for an admin to
  # copy out (README "Operate"): compiled here from kubectl-coil.js into coil's own Bun runtime with
  # the flags of hack/kubectl-coil/build.ts (COMPILE_FLAGS), so it is byte for byte the krew
  # archive's linux/amd64 executable (test/image.test.ts) and the image carries no second runtime.
  # About 0.5 s and 130 MB of memory; the output is written to a temporary directory first.
  kubectl-coil-linux-amd64)
    [ "$#" -eq 0 ] || { echo "usage: kubectl-coil-linux-amd64 > kubectl-coil   (takes no arguments)" >&2; exit 2; }
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp "$root/kubectl-coil.js" "$work/kubectl-coil.js"
    (cd "$work" && BUN_BE_BUN=1 coil build --compile --no-compile-autoload-dotenv --no-compile-autoload-bunfig \
      --target=bun-linux-x64 --compile-executable-path="$(command -v coil)" ./kubectl-coil.js --outfile ./kubectl-coil >/dev/null)
    cat "$work/kubectl-coil"
    exit 0
    ;;
  *) echo "unknown program: $0" >&2; exit 2 ;;
esac
if [ -n "${bundle:-}" ]; then
  export BUN_BE_BUN=1
  exec coil --no-install "$root/$bundle" "$@"
fi
# shellcheck disable=SC2086 # node_flags is a list of words
exec node $node_flags "$root/$main" "$@"
