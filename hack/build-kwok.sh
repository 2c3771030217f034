#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok/cmd/kwok) from the Go module proxy into a cache folder keyed by
# version with kwok's own node Stages beside it, and skips the build when they are already there. The scale benchmark
# (hack/bench/scale.ts) runs it to keep its simulated Nodes Ready (docs/performance.md#scale).
#
#   hack/build-kwok.sh                     # prints the binary's path on its last line
#   KWOK_VERSION=v0.8.0 COIL_CACHE_DIR=/somewhere hack/build-kwok.sh
#
# v0.8.0 is built against client-go v0.36 (Kubernetes v1.36, the control plane's release). The
# cache lives outside the work tree for the reason hack/build-control-plane.sh gives.
set -euo pipefail

KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${COIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coil}
OUT="$CACHE/tools/kwok-$KWOK_VERSION"

have() { [ -x "$OUT/kwok" ] && [ -f "$OUT/stages/node-initialize.yaml" ] && [ -f "$OUT/stages/node-heartbeat-with-lease.yaml" ]; }
# shellcheck source=lib/cached-build.sh
. "$(dirname "$0")/lib/cached-build.sh"
cached_build_start kwok "$CACHE/tools/.kwok.lock" "$OUT/kwok"

export GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
start=$(date +%s)
# kwok's go.mod has no replace directive, so `go install module@version` builds it as released.
GOBIN="$OUT.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
# kwok's own node Stages of the same release (kustomize/stage/node in its module): Ready at once,
# then a heartbeat with a Lease as a kubelet's. The benchmark adds no Pod stage of kwok's.
src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
mkdir -p "$OUT.tmp/stages"
cp "$src/kustomize/stage/node/fast/node-initialize.yaml" \
   "$src/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" "$OUT.tmp/stages/"
"$OUT.tmp/kwok" --version >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "kwok built in $(( $(date +%s) - start )) s: $(du -sh "$OUT/kwok" | cut -f1) in $OUT" >&2
echo "$OUT/kwok"
