# shellcheck shell=bash
# Sourced by hack/build-control-plane.sh and hack/build-node.sh: which Kubernetes and etcd to
# build, from hack/kubernetes-versions.
#
#   k8s_versions    # sets K8S_VERSION and ETCD_VERSION
#
# K8S_VERSION unset: the table's first (newest) line. A minor (`1.33`): that line. A full version
# (`v1.33.6`): that version, with its minor's etcd (the newest line's when the minor is not
# listed). ETCD_VERSION, when set, wins.
k8s_versions() {
  local table line minor
  table="$(dirname "${BASH_SOURCE[0]}")/../kubernetes-versions"
  if [ -z "${K8S_VERSION:-}" ]; then
    line=$(awk '!/^#/ && NF { print; exit }' "$table")
  else
    minor=${K8S_VERSION#v}; minor=${minor%.*}
    [[ $K8S_VERSION =~ ^v?[0-9]+\.[0-9]+$ ]] && minor=${K8S_VERSION#v}
    line=$(awk -v m="$minor" '!/^#/ && $1 == m { print; exit }' "$table")
    if [ -z "$line" ]; then
      [[ $K8S_VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "Kubernetes $K8S_VERSION: not a line of $table nor a full version (v1.x.y)" >&2; exit 1; }
      line=$(awk '!/^#/ && NF { print; exit }' "$table")
    fi
  fi
  [[ ${K8S_VERSION:-} =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || K8S_VERSION=$(awk '{ print $2 }' <<<"$line")
  ETCD_VERSION=${ETCD_VERSION:-$(awk '{ print $3 }' <<<"$line")}
}
