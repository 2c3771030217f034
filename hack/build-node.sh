#!/usr/bin/env bash
# Builds the node's Kubernetes binaries — kubelet, kube-proxy — and kube-scheduler from the Go
# module proxy into a cache folder keyed by version, and skips the build when they are there.
# The module is the control plane's (hack/lib/k8s-module.sh), so every Kubernetes binary of the
# lab is of one release.
#
#   hack/build-node.sh                     # prints the bin dir on its last line
#   K8S_VERSION=1.33 hack/build-node.sh    # a line of hack/kubernetes-versions
#   K8S_VERSION=v1.36.3 COIL_CACHE_DIR=/somewhere hack/build-node.sh
#
# Why build: neither npm nor Debian ships a kubelet of a current release. containerd 2 and the CNI
# reference plugins are built by hack/build-containerd.sh and hack/build-cni-plugins.sh; runc (and
# containerd 1.6, the lab's other runtime) come from Debian (hack/setup.sh).
set -euo pipefail

# shellcheck source=lib/k8s-versions.sh
. "$(dirname "$0")/lib/k8s-versions.sh"
k8s_versions
CACHE=${COIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coil}
OUT="$CACHE/node/k8s-$K8S_VERSION"
WORK="$CACHE/node/build"
BINS=(kubelet kube-proxy kube-scheduler)

have() { for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || return 1; done; }
# shellcheck source=lib/cached-build.sh
. "$(dirname "$0")/lib/cached-build.sh"
cached_build_start "node binaries" "$CACHE/node/.lock" "$OUT" kubelet

export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp" "$WORK/k8s"
start=$(date +%s)
# shellcheck source=lib/k8s-module.sh
. "$(dirname "$0")/lib/k8s-module.sh"
k8s_module "$WORK/k8s" "$K8S_VERSION"
(
  cd "$WORK/k8s"
  pkgs=("${BINS[@]/#/k8s.io/kubernetes/cmd/}")
  go get -tool "${pkgs[@]/%/@$K8S_VERSION}"
  go mod tidy
  go build -trimpath -pgo=off -ldflags "$(k8s_ldflags "$K8S_VERSION")" -o "$OUT.tmp/" "${pkgs[@]}"
)
"$OUT.tmp/kubelet" --version >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "node binaries built in $(( $(date +%s) - start )) s: $(du -sh "$OUT" | cut -f1) in $OUT" >&2
echo "$OUT"
