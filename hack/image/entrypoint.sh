#!/bin/sh
# Dispatches on the name it was called by (coil-controller, coild, coil-egress, coil-install-cni,
# coil-migrator).
set -e
case "$(basename "$0")" in
  coil-controller)  main=dist/src/controller/main.js ;;
  coild)            main=dist/src/node-agent/main.js ;;
  coil-egress)      main=dist/src/egress-agent/main.js ;;
  coil-install-cni) main=dist/src/cni-installer/main.js ;;
  coil-migrator)    main=dist/src/migrator/main.js ;;
  *) echo "unknown program: $0" >&2; exit 2 ;;
esac
exec node /opt/coil/$main "$@"
