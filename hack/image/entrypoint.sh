#!/bin/sh
# Dispatches on the name it was called by (coil-controller, coild, coil-egress, coil-install-cni,
# coil-migrator). COIL_ROOT (default /opt/coil, where the Dockerfile puts dist/) lets the
# benchmark run this very script from a checkout (hack/bench/blockrequest-latency.ts).
set -e
root="${COIL_ROOT:-/opt/coil}"
node_flags=""
case "$(basename "$0")" in
  coil-controller)  main=dist/src/controller/main.js ;;
  coild)            main=dist/src/node-agent/main.js ;;
  coil-egress)      main=dist/src/egress-agent/main.js ;;
  coil-install-cni) main=dist/src/cni-installer/main.js ;;
  coil-migrator)    main=dist/src/migrator/main.js ;;
  *) echo "unknown program: $0" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086 # node_flags is a list of words
exec node $node_flags "$root/$main" "$@"
