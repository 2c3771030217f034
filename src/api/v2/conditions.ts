/**
 * Condition helpers following the Kubernetes API conventions ("Typical status properties"):
 * `lastTransitionTime` changes only when `status` changes. Pure: the caller passes the time.
 */

/** One status condition (the shape of metav1.Condition used by BlockRequest). */
export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  lastProbeTime?: string;
  lastTransitionTime?: string;
  reason?: string;
  message?: string;
}

/** The condition of `type`, or undefined. */
export function findCondition(conditions: readonly Condition[] | undefined, type: string): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

/** True when the condition of `type` exists with status True. */
export function isConditionTrue(conditions: readonly Condition[] | undefined, type: string): boolean {
  return findCondition(conditions, type)?.status === 'True';
}

/**
 * Returns a new list with `next` set: an existing condition of the same type is replaced, and
 * its `lastTransitionTime` kept when the status did not change.
 * @param now RFC 3339 time used for lastProbeTime and, on a transition, lastTransitionTime.
 */
export function setCondition(
  conditions: readonly Condition[] | undefined,
  next: Omit<Condition, 'lastProbeTime' | 'lastTransitionTime'>,
  now: string,
): Condition[] {
  const old = findCondition(conditions, next.type);
  const lastTransitionTime = old && old.status === next.status && old.lastTransitionTime ? old.lastTransitionTime : now;
  const updated: Condition = { ...next, lastProbeTime: now, lastTransitionTime };
  return [...(conditions ?? []).filter((c) => c.type !== next.type), updated];
}
