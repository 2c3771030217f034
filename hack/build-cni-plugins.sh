#!/usr/bin/env bash
# Builds the CNI reference plugins the real-node lab chains or the runtime runs — portmap (after
# `coil` in the chart's conflist) and loopback (containerd's own lo network) — from the Go module
# proxy into a cache folder keyed by version, and skips the build when they are already there.
#
#   hack/build-cni-plugins.sh              # prints the bin dir on its last line
#   CNI_PLUGINS_VERSION=v1.9.1 COIL_CACHE_DIR=/somewhere hack/build-cni-plugins.sh
#
# Why build: a conflist of cniVersion 1.1.0 (what makes containerd 2 call CNI STATUS) is passed to
# every plugin of the chain, and Debian bookworm's plugins (1.1.1) support the spec up to 1.0.0:
# portmap refuses ADD ("incompatible CNI versions") and STATUS of such a conflist. Plugins v1.6.0
# and later are built on libcni's spec 1.1.0 (docs/real-nodes.md#container-runtimes). v1.9.1 is
# the release containerd v2.4.2 requires. The plugins' go.mod has no replace directive.
set -euo pipefail

CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
CACHE=${COIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coil}
OUT="$CACHE/cni-plugins/plugins-$CNI_PLUGINS_VERSION"
BINS=(portmap loopback)

have() { for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || return 1; done; }
# shellcheck source=lib/cached-build.sh
. "$(dirname "$0")/lib/cached-build.sh"
cached_build_start "CNI plugins" "$CACHE/cni-plugins/.lock" "$OUT"

export GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
start=$(date +%s)
MOD=github.com/containernetworking/plugins
GOBIN="$OUT.tmp" go install -trimpath -ldflags "-s -w -X $MOD/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
  "$MOD/plugins/meta/portmap@$CNI_PLUGINS_VERSION" "$MOD/plugins/main/loopback@$CNI_PLUGINS_VERSION"
echo '{}' | CNI_COMMAND=VERSION "$OUT.tmp/portmap" >&2; echo >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "CNI plugins built in $(( $(date +%s) - start )) s: $(du -sh "$OUT" | cut -f1) in $OUT" >&2
echo "$OUT"
