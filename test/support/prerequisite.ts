/**
 * Tests that need something a machine may lack (root, a built artifact, a Debian package, the VM
 * kernel) take their `skip` option from {@link prerequisite}. On a developer's machine a missing
 * prerequisite skips the test and node --test prints the reason. Under `CI=true` it fails the
 * test file instead: CI runs on a fresh clone after `hack/setup.sh`, which installs every
 * prerequisite, so a missing one there is a setup defect, and a skip would hide a test that never
 * runs (README, "What the commands do").
 *
 * A test that skips for a property of the machine that no setup can change (a kernel built
 * without FoU) does not use this: it skips with its reason, and another test covers it.
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
