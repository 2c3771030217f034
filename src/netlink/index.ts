/**
 * Kernel networking shared by coild and coil-egress: the NetlinkExecutor (typed requests and dumps
 * through rtnetlink, else iproute2), the iproute2 `ip -batch -` runner, netns entry,
 * link/addr/route/rule builders and JSON reads, sysctls, MTU and feature detection. Everything
 * that touches the kernel goes through here (docs/design.md#all-kernel-io-in-one-layer).
 */
export * from './addr.js';
export * from './apply-step.js';
export * from './cidr.js';
export * from './features.js';
export * from './iproute2/ip-runner.js';
export * from './link.js';
export * from './link-reaper.js';
export * from './mtu.js';
export * from './netlink-executor.js';
export * from './netlink-error.js';
export * from './route.js';
export * from './rule.js';
export * from './sysctl.js';
