#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and etcd from the Go module proxy into a cache
# folder keyed by version, and skips the build when the binaries are already there.
#
#   hack/build-control-plane.sh            # prints the bin dir on its last line
#   K8S_VERSION=1.33 hack/build-control-plane.sh    # a line of hack/kubernetes-versions
#   K8S_VERSION=v1.36.3 ETCD_VERSION=v3.6.16 COIL_CACHE_DIR=/somewhere hack/build-control-plane.sh
#
# Why build: no npm or Debian package ships kube-apiserver
# (docs/design.md#building-the-control-plane). Why the cache lives outside the work tree by default:
# CI runs in a fresh clone on the same machine, and a cold build takes ~15 min on 2 cores;
# $HOME/.cache survives the clone.
set -euo pipefail

# shellcheck source=lib/k8s-versions.sh
. "$(dirname "$0")/lib/k8s-versions.sh"
k8s_versions
CACHE=${COIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coil}
OUT="$CACHE/control-plane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
WORK="$CACHE/control-plane/build"

have() { [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kube-controller-manager" ] && [ -x "$OUT/etcd" ]; }
# shellcheck source=lib/cached-build.sh
. "$(dirname "$0")/lib/cached-build.sh"
cached_build_start "control plane" "$CACHE/control-plane/.lock" "$OUT" "the control plane"

export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp" "$WORK/k8s" "$WORK/etcd"
start=$(date +%s)

# --- kube-apiserver + kube-controller-manager (the module of hack/lib/k8s-module.sh) ----------
# shellcheck source=lib/k8s-module.sh
. "$(dirname "$0")/lib/k8s-module.sh"
k8s_module "$WORK/k8s" "$K8S_VERSION"
(
  cd "$WORK/k8s"
  go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
               "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION"
  go mod tidy
  # -pgo=off: kube-apiserver ships a default.pgo; applying it only slows the build.
  go build -trimpath -pgo=off -ldflags "$(k8s_ldflags "$K8S_VERSION")" -o "$OUT.tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
)

# --- etcd (its own module: in the k8s module MVS would lift etcd's libraries to k8s's pins) ---
(
  cd "$WORK/etcd"
  rm -f go.mod go.sum
  go mod init coil-envtest-etcd >/dev/null 2>&1
  go mod edit -go=1.26.0
  go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" go.etcd.io/etcd/server/v3
)

"$OUT.tmp/kube-apiserver" --version >&2
"$OUT.tmp/etcd" --version | head -1 >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "control plane built in $(( $(date +%s) - start )) s: $(du -sh "$OUT" | cut -f1) in $OUT" >&2
echo "$OUT"
