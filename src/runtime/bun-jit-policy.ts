/**
 * Raises JavaScriptCore's tier-up thresholds 1000× when coil's long-lived programs run on Bun
 * (coild, coil-egress: `BUN_BE_BUN=1 coil main.bundle.cjs`); under Node it does nothing.
 *
 * Why: these programs run on every node and wait most of the time; what runs hot (a CNI ADD's
 * gRPC decode, wiring, encode) runs a few times per second at most. Optimised code and the
 * optimising compilers' working memory are what they would pay for it. Measured with
 * hack/bench/footprint.ts (coild RSS after 1,000 ADD + 1,000 DEL, 2026-11-25, Bun 1.4.5): policy 1
 * (JSC's default) 113.0 MB, 100 101.1 MB, 1000 90.7 MB, 10000 92.6 MB, 100000 92.5 MB; the churn's
 * wall time 20.9 s → 23.4 s at 1000 (load of other sessions alongside). hack/bench/cni-add.ts
 * holds the latency side (README, "coild's runtime").
 *
 * Imported first by each entrypoint, so that the modules after it start under the policy too.
 * (The `coil` executable's own build-time policy, hack/build-cni.sh, is for its one-shot CNI runs;
 * coild's netlink agent sets it back to 1 for its hot loop: netlink-agent-main.ts.)
 */
export const JIT_POLICY = 1000;

(globalThis as { Bun?: { unsafe?: { setJITPolicy?: (scale: number) => void } } }).Bun?.unsafe?.setJITPolicy?.(JIT_POLICY);
