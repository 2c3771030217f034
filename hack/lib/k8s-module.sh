# shellcheck shell=bash
# Sourced by hack/build-control-plane.sh and hack/build-node.sh: the Go module from which
# Kubernetes commands are built at one release, so every Kubernetes binary of the project comes
# from the same module set.
#
#   k8s_module DIR VERSION    # writes DIR/go.mod for k8s.io/kubernetes@VERSION (no tools yet)
#   k8s_ldflags VERSION       # -ldflags that stamp VERSION into the binaries (`--version`)
#
# k8s.io/kubernetes requires every staging module at v0.0.0 and resolves them with replace
# directives in ITS go.mod, which a dependency's go.mod cannot impose: derive the same replace
# list from the upstream go.mod so a staging module added in a later release is never missed.

k8s_module() {
  local dir=$1 version=$2 staging gomod m
  (
    cd "$dir"
    rm -f go.mod go.sum
    go mod init coil-envtest-bin >/dev/null 2>&1
    go mod edit -go=1.26.0
    staging="v0.${version#v1.}"
    gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
    for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$gomod"); do
      go mod edit -replace="$m=$m@$staging"
    done
    grep -m1 '^godebug' "$gomod" >> go.mod || true
  )
}

k8s_ldflags() {
  local version=$1 minor p ldf="-s -w"
  minor=${version#v1.}; minor=${minor%%.*}
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf="$ldf -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  echo "$ldf"
}
