# One image for every coil program: coil-controller, coild, coil-egress, coil-install-cni and
# the coil CNI executable (a standalone Bun build, copied to the host's /opt/cni/bin).
# Not built in this repository's CI (no container engine there); `docker build .` builds it.

FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build \
 && bash hack/build-cni.sh \
 && npm prune --omit=dev --no-audit --no-fund

FROM node:24-bookworm-slim
# iproute2 (ip -batch), nftables/iptables (egress NAT), kmod (modprobe fou), conntrack
# (egress metrics), util-linux (nsenter).
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 nftables iptables kmod conntrack util-linux \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/coil
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist/src ./dist/src
COPY --from=build /src/proto ./proto
COPY --from=build /src/dist/bin/coil /usr/local/coil/coil
# coild's netlink agent runs on the Bun runtime inside `coil`; NetlinkAgent looks in dist/bin.
COPY --from=build /src/dist/bin/netlink-agent.js ./dist/bin/netlink-agent.js
RUN ln -s /usr/local/coil/coil dist/bin/coil
COPY hack/image/entrypoint.sh /usr/local/coil/coil-entrypoint
RUN for p in coil-controller coild coil-egress coil-install-cni coil-migrator; do ln -s coil-entrypoint /usr/local/coil/$p; done
ENV PATH=/usr/local/coil:$PATH NODE_ENV=production
# No USER: coild and coil-egress need root in their pods; the chart runs coil-controller as
# uid 10000 through its pod securityContext.
