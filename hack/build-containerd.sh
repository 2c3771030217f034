#!/usr/bin/env bash
# Builds containerd 2.x (containerd, its runc shim containerd-shim-runc-v2, and ctr) from the Go
# module proxy into a cache folder keyed by version, and skips the build when the binaries are
# already there. The real-node lab runs it by default (docs/real-nodes.md#container-runtimes);
# runc stays Debian's.
#
#   hack/build-containerd.sh               # prints the bin dir on its last line
#   CONTAINERD_VERSION=v2.4.2 COIL_CACHE_DIR=/somewhere hack/build-containerd.sh
#
# Why build: Debian bookworm ships containerd 1.6, a release line past its end of life; no Debian
# or npm package ships 2.x. containerd's go.mod has no replace directive, so `go install
# module@version` builds each command with exactly the dependencies of the release. Build tags as
# containerd's Makefile with BUILDTAGS="no_btrfs no_devmapper no_zfs": without cgo, and without the
# snapshotters this machine cannot use (the lab's nodes use overlayfs). The shim is built as the
# Makefile builds it (CGO_ENABLED=0, tag no_grpc). The cache lives outside the work tree for the
# reason hack/build-control-plane.sh gives.
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
CACHE=${COIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coil}
OUT="$CACHE/containerd/containerd-$CONTAINERD_VERSION"
BINS=(containerd containerd-shim-runc-v2 ctr)

have() { for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || return 1; done; }
# shellcheck source=lib/cached-build.sh
. "$(dirname "$0")/lib/cached-build.sh"
cached_build_start containerd "$CACHE/containerd/.lock" "$OUT"

export GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
start=$(date +%s)
MOD=github.com/containerd/containerd/v2
LDFLAGS="-s -w -X $MOD/version.Version=$CONTAINERD_VERSION -X $MOD/version.Package=$MOD"
TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs osusergo netgo static_build"
GOBIN="$OUT.tmp" go install -trimpath -tags "$TAGS" -ldflags "$LDFLAGS" "$MOD/cmd/containerd@$CONTAINERD_VERSION" "$MOD/cmd/ctr@$CONTAINERD_VERSION"
GOBIN="$OUT.tmp" go install -trimpath -tags "$TAGS no_grpc" -ldflags "$LDFLAGS" "$MOD/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
"$OUT.tmp/containerd" --version >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "containerd built in $(( $(date +%s) - start )) s: $(du -sh "$OUT" | cut -f1) in $OUT" >&2
echo "$OUT"
