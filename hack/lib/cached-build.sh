# shellcheck shell=bash
# Sourced by hack/build-control-plane.sh, hack/build-node.sh and hack/build-kwok.sh: how a build of
# Go binaries into the cache starts. The caller defines `have` (true when the cached build is
# complete) first.
#
#   cached_build_start WHAT LOCK RESULT [BUILT]
#
# When `have` holds, prints "WHAT cached: RESULT" to stderr and RESULT to stdout and exits 0.
# Otherwise it takes LOCK (fd 9, held until the script ends), so that parallel callers (several
# test files, the lab) wait for one build instead of racing it; then prints RESULT and exits 0 when
# the build it waited for made it, exits 1 when Go is missing (naming BUILT, default WHAT), and
# else returns, the lock held, for the caller to build.
cached_build_start() {
  local what=$1 lock=$2 result=$3 built=${4:-$1}
  if have; then
    echo "$what cached: $result" >&2
    echo "$result"; exit 0
  fi
  mkdir -p "$(dirname "$lock")"
  exec 9>"$lock"
  flock 9
  if have; then echo "$result"; exit 0; fi
  command -v go >/dev/null || { echo "go is required (Go >= 1.26) to build $built" >&2; exit 1; }
}
