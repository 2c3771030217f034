/**
 * Validation and defaulting of Egress specs for the admission webhooks: every rule of Coil's
 * `EgressSpec.validate()` with Coil's (apimachinery's) messages, plus ours where a bad value would
 * otherwise only surface later as a failed Deployment or Service write in the reconciler.
 *
 * Pure: returns FieldError lists; the webhook turns them into a 422 Invalid.
 * @see docs/compatibility.md#egress-webhooks
 */
import { CidrError, formatCidr, parseCidrWithAddress, tryParseAddress, tryParseCidr, type ParsedCidr } from '../../ipam/cidr.js';
import { EGRESS_CONTAINER_NAME, type Egress, type EgressSpec } from './egress.js';
import { fieldError, type FieldError } from './field-error.js';
import { isQualifiedName, isValidLabelValue, isValidPercent, percentValue, TOTAL_ANNOTATION_SIZE_LIMIT_BYTES } from './egress-validation-names.js';
import { snatAddressesProblems } from './snat-addresses.js';

/**
 * ServiceAccount of every egress pod; the reconciler forces it
 * (docs/compatibility.md#egress-reconciler).
 */
export const EGRESS_SERVICE_ACCOUNT = 'coil-egress';

/** An int-or-string value as JSON carries it. */
type IntOrString = number | string;

/**
 * Validates a spec on CREATE and UPDATE (Coil has no immutable Egress field). Coil's rules:
 * - `spec.destinations[i]` parses as a CIDR (`invalid CIDR address: <s>`, Go's `net.ParseCIDR`);
 * - `spec.strategy.type` is `Recreate` or `RollingUpdate` when a strategy is given (NotSupported);
 * - `spec.template.metadata.labels` keys and values are valid;
 * - annotation keys are valid — by Kubernetes' rule, not Coil's (see validateAnnotations);
 * - `spec.podDisruptionBudget`: not both set; each a non-negative int or a percent, ≤ 100%.
 * Ours: no host bits in a destination, no duplicate destination; `spec.strategy.rollingUpdate`
 * absent with `Recreate`, its values int-or-percent and not both 0 (apps/v1's Deployment rules,
 * which would otherwise fail only when the reconciler writes the Deployment); `spec.snatAddresses[i]`
 * (our field) each a plain unicast IP address in canonical text, at most one per family
 * (snat-addresses.ts: Kubernetes' rule for new IP fields, so every reader can compare the text).
 * @see docs/compatibility.md#egress-webhooks, k8s.io/kubernetes `ValidateDeploymentStrategy`
 */
export function validateEgressSpec(spec: Readonly<EgressSpec>): FieldError[] {
  return [
    ...validateDestinations(spec.destinations ?? []),
    ...validateStrategy(spec.strategy),
    ...validateLabels(spec.template?.metadata?.labels ?? {}, 'spec.template.metadata.labels'),
    ...validateAnnotations(spec.template?.metadata?.annotations ?? {}, 'spec.template.metadata.annotations'),
    ...validatePdb(spec.podDisruptionBudget),
    ...validateSnatAddresses(spec.snatAddresses ?? []),
  ];
}

/**
 * Non-fatal notes for the user (admission warnings): fields the reconciler overrides or ignores,
 * and a shared SNAT address of a family no destination has (no flow of that family reaches the
 * NAT pods).
 * @returns one line per note, empty when none
 */
export function egressWarnings(spec: Readonly<EgressSpec>): string[] {
  const warnings: string[] = [];
  const sa = spec.template?.spec?.serviceAccountName;
  if (sa && sa !== EGRESS_SERVICE_ACCOUNT) warnings.push(`spec.template.spec.serviceAccountName: replaced by ${EGRESS_SERVICE_ACCOUNT}`);
  if (spec.sessionAffinity === 'None' && spec.sessionAffinityConfig) warnings.push('spec.sessionAffinityConfig: ignored when sessionAffinity is None');
  // Coil's coild tunnels every client to the ClusterIP, which reaches the standby NAT pods too,
  // whose answers come back to the active one only (docs/egress-failover.md#sessions-kept-the-shared-snat-address).
  if ((spec.snatAddresses ?? []).length > 0) warnings.push("spec.snatAddresses: every node with a client pod of this Egress must run coil's coild with --egress-nat-steering (the default); on a node running Coil's coild the clients' flows break");
  const destinationFamilies = new Set((spec.destinations ?? []).map((d) => tryParseCidr(d)?.family));
  (spec.snatAddresses ?? []).forEach((a, i) => {
    const family = tryParseAddress(a)?.family;
    if (family !== undefined && !destinationFamilies.has(family)) warnings.push(`spec.snatAddresses[${i}]: no destination of its family; unused`);
  });
  return warnings;
}

/**
 * Coil's defaulting (mutating webhook, CREATE): a template without containers gets the one
 * container `{name: egress}`, which the reconciler fills in. Mutates and returns `egress`.
 * @see docs/compatibility.md#egress-webhooks (the mutating one)
 */
export function defaultEgress(egress: Egress): Egress {
  const template = egress.spec?.template;
  if (!template) return egress;
  const podSpec = (template.spec ??= { containers: [] });
  if (!podSpec.containers || podSpec.containers.length === 0) podSpec.containers = [{ name: EGRESS_CONTAINER_NAME }];
  return egress;
}

function validateDestinations(destinations: readonly string[]): FieldError[] {
  const errors: FieldError[] = [];
  const seen = new Map<string, number>();
  destinations.forEach((d, i) => {
    const path = `spec.destinations[${i}]`;
    let parsed: ParsedCidr;
    try {
      parsed = parseCidrWithAddress(d);
    } catch (e) {
      if (!(e instanceof CidrError)) throw e;
      errors.push(fieldError(path, e.message, 'Invalid', d));
      return;
    }
    const canonical = formatCidr(parsed.cidr);
    if (parsed.hasHostBits) errors.push(fieldError(path, `host bits are set; did you mean ${canonical}`, 'Invalid', d));
    const first = seen.get(canonical);
    if (first !== undefined) errors.push(fieldError(path, `duplicate of spec.destinations[${first}]`, 'Invalid', d));
    else seen.set(canonical, i);
  });
  return errors;
}

function validateSnatAddresses(addresses: readonly string[]): FieldError[] {
  const name = (i: number): string => `spec.snatAddresses[${i}]`;
  return snatAddressesProblems(addresses, { canonical: true, name }).map((p) => fieldError(name(p.index), p.message, 'Invalid', p.value));
}

function validateStrategy(strategy: EgressSpec['strategy']): FieldError[] {
  if (!strategy) return [];
  const type = strategy.type ?? '';
  if (type !== 'Recreate' && type !== 'RollingUpdate') {
    return [fieldError('spec.strategy.type', 'supported values: "Recreate", "RollingUpdate"', 'NotSupported', type)];
  }
  const ru = strategy.rollingUpdate;
  if (!ru) return [];
  if (type === 'Recreate') return [fieldError('spec.strategy.rollingUpdate', "may not be specified when strategy `type` is 'Recreate'", 'Forbidden')];
  const errors = [
    ...intOrPercent(ru.maxSurge, 'spec.strategy.rollingUpdate.maxSurge'),
    ...intOrPercent(ru.maxUnavailable, 'spec.strategy.rollingUpdate.maxUnavailable'),
    ...notMoreThan100Percent(ru.maxUnavailable, 'spec.strategy.rollingUpdate.maxUnavailable'),
  ];
  // apps/v1 defaults an absent value to 25%, so only two explicit zeros can stall a rollout.
  if (isZero(ru.maxSurge) && isZero(ru.maxUnavailable)) {
    errors.push(fieldError('spec.strategy.rollingUpdate.maxUnavailable', 'may not be 0 when `maxSurge` is 0', 'Invalid', ru.maxUnavailable));
  }
  return errors;
}

function isZero(v: IntOrString | undefined): boolean {
  return v === 0 || percentValue(v ?? '') === 0;
}

/** apimachinery `ValidateLabels`: each key a qualified name, each value a label value, at the map's path. */
function validateLabels(labels: Readonly<Record<string, string>>, path: string): FieldError[] {
  return Object.entries(labels).flatMap(([k, v]) => [
    ...isQualifiedName(k).map((m) => fieldError(path, m, 'Invalid', k)),
    ...isValidLabelValue(String(v)).map((m) => fieldError(path, m, 'Invalid', v)),
  ]);
}

/**
 * Kubernetes' annotation rule (apimachinery `ValidateAnnotations`), the one the Deployment's pod
 * template must pass when the reconciler writes it: each key, lower-cased, is a qualified name;
 * values are free; keys and values together at most 256 KiB. This deliberately differs from
 * Coil, which checks each key with `ValidateLabelName` (no lower-casing, no size limit), so Coil
 * refuses `Example.COM/note`, which Kubernetes accepts on any object, and lets a template through
 * that the Deployment write would then fail on (docs/compatibility.md, "Admission").
 */
function validateAnnotations(annotations: Readonly<Record<string, string>>, path: string): FieldError[] {
  const errors = Object.keys(annotations).flatMap((k) => isQualifiedName(k.toLowerCase()).map((m) => fieldError(path, m, 'Invalid', k)));
  const size = Object.entries(annotations).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(String(v)), 0);
  if (size > TOTAL_ANNOTATION_SIZE_LIMIT_BYTES) errors.push(fieldError(path, `must have at most ${TOTAL_ANNOTATION_SIZE_LIMIT_BYTES} bytes`, 'TooLong'));
  return errors;
}

function validatePdb(pdb: EgressSpec['podDisruptionBudget']): FieldError[] {
  if (!pdb) return [];
  const path = 'spec.podDisruptionBudget';
  const errors: FieldError[] = [];
  if (pdb.minAvailable != null && pdb.maxUnavailable != null) {
    errors.push(fieldError(path, 'minAvailable and maxUnavailable cannot be both set', 'Invalid', { minAvailable: pdb.minAvailable, maxUnavailable: pdb.maxUnavailable }));
  }
  for (const key of ['minAvailable', 'maxUnavailable'] as const) {
    errors.push(...intOrPercent(pdb[key], `${path}.${key}`), ...notMoreThan100Percent(pdb[key], `${path}.${key}`));
  }
  return errors;
}

/** apps `ValidatePositiveIntOrPercent`: a non-negative integer or a percent string. */
function intOrPercent(value: IntOrString | undefined | null, path: string): FieldError[] {
  if (value == null) return [];
  if (typeof value === 'string') return isValidPercent(value).map((m) => fieldError(path, m, 'Invalid', value));
  if (Number.isInteger(value)) return value < 0 ? [fieldError(path, 'must be greater than or equal to 0', 'Invalid', value)] : [];
  return [fieldError(path, "must be an integer or percentage (e.g '5%')", 'Invalid', value)];
}

/** apps `IsNotMoreThan100Percent`. */
function notMoreThan100Percent(value: IntOrString | undefined | null, path: string): FieldError[] {
  const p = value == null ? undefined : percentValue(value);
  return p !== undefined && p > 100 ? [fieldError(path, 'must not be greater than 100%', 'Invalid', value)] : [];
}
