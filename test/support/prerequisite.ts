/**
 * Tests that need something a machine may lack (root, a built artifact, a Debian package, the VM
 * kernel) take their `skip` option from {@link prerequisite}. On a developer's machine a missing
 * prerequisite skips the test and node --test prints the reason. Under `CI=true` it fails the
 * test file instead: CI runs on a fresh clone after `hack/setup.sh`, which installs every
 * prerequisite, so a missing one there is a setup defect, and a skip would hide a test that never
 * runs (README, "What the commands do").
 *
 * A test step that skips for a property of the machine that no setup can change (a kernel built
 * without FoU) takes its reason from {@link kernelLacks} or {@link kernelHas} instead, which name
 * where the step runs. No other skip is allowed: test/skip-guard.test.ts reads every test source
 * for skips, and under `CI=true` the run's reporter (test/support/skip-reporter.ts) fails a run
 * whose skips are not kernel-module skips.
 */

/**
 * @param reason why the test cannot run here, or undefined when it can
 * @returns `reason`, for the test's `skip` option
 * @throws Error naming the reason when `CI=true` and a reason is given
 */
export function prerequisite(reason: string | undefined): string | undefined {
  if (reason !== undefined && process.env.CI === 'true') {
    throw new Error(`CI=true, and this test cannot run here: ${reason}. CI runs as root after hack/setup.sh, which provides every prerequisite; a skip there would hide a test that never runs`);
  }
  return reason;
}

/**
 * The VM tests (test/netns/fou-vm.ts): each runs, on a stock kernel, test files whose steps a
 * kernel without FoU skips. A kernel-module skip names one of them.
 */
export const VM_TESTS = ['test/netns/egress-fou-vm.test.ts', 'test/netns/egress-failover-vm.test.ts'] as const;

/** The start of every kernel-module skip's reason; the only skips a CI run allows (test/support/skip-reporter.ts). */
export const KERNEL_SKIP = /^this kernel (lacks|has) [\w, /-]+: .*(test\/netns\/egress-(fou|failover)-vm\.test\.ts|npm test on a kernel without FoU)/;

/**
 * The skip of a test step that needs kernel modules this kernel lacks (FoU, IPIP, ip6tnl here: a
 * property of the machine no setup changes, so not a {@link prerequisite}). `vmTest` must list the
 * test's file and run it whole in its VM (test/skip-guard.test.ts checks that it does).
 * @param missing the modules lacking (probeFeatures); none: the step runs
 * @returns the skip reason, or undefined when nothing lacks
 */
export function kernelLacks(missing: readonly string[], vmTest: (typeof VM_TESTS)[number]): string | undefined {
  return missing.length === 0 ? undefined : `this kernel lacks ${missing.join(', ')}: ${vmTest} runs this step in a VM with a stock kernel`;
}

/**
 * The skip of a step that shows what happens on a kernel without FoU, on one that has it (the VM).
 * npm test runs it on this project's machine, whose kernel lacks FoU.
 * @param present the modules present that the step needs absent; none: the step runs
 */
export function kernelHas(present: readonly string[]): string | undefined {
  return present.length === 0 ? undefined : `this kernel has ${present.join(', ')}: npm test on a kernel without FoU runs this step`;
}
