/**
 * The small subset of OpenAPI v3 / apiextensions.k8s.io/v1 `JSONSchemaProps` that Coil's CRD
 * schemas use, written with the raw wire keys (`x-kubernetes-int-or-string`) so that hack/
 * can emit the CRDs without a mapping step. Pure data; nothing here does I/O.
 *
 * @see https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema
 */
export interface Schema {
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  format?: string;
  description?: string;
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  items?: Schema;
  required?: string[];
  enum?: (string | number)[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  anyOf?: Schema[];
  nullable?: boolean;
  'x-kubernetes-int-or-string'?: boolean;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  'x-kubernetes-embedded-resource'?: boolean;
  'x-kubernetes-list-type'?: 'atomic' | 'set' | 'map';
  'x-kubernetes-list-map-keys'?: string[];
  'x-kubernetes-map-type'?: 'atomic' | 'granular';
  'x-kubernetes-validations'?: { rule: string; message?: string; fieldPath?: string; reason?: string }[];
}

/** A column of `kubectl get` output. */
export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  description?: string;
  priority?: number;
}

/**
 * Everything about one Coil kind that the API server needs: names, scope, schema,
 * subresources and printer columns. `hack/generate.ts` turns it into a CRD, and the runtime
 * uses group/version/plural to build API paths.
 */
export interface KindDefinition {
  readonly group: string;
  readonly version: string;
  readonly kind: string;
  readonly listKind: string;
  readonly plural: string;
  readonly singular: string;
  readonly shortNames: readonly string[];
  readonly categories: readonly string[];
  readonly namespaced: boolean;
  readonly description: string;
  readonly schema: Schema;
  readonly subresources?: {
    readonly status?: boolean;
    readonly scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath?: string };
  };
  readonly printerColumns?: readonly PrinterColumn[];
}

/** Shorthands that keep the schema files readable. */
export const str = (description: string, extra: Schema = {}): Schema => ({ type: 'string', description, ...extra });
export const int32 = (description: string, extra: Schema = {}): Schema => ({ type: 'integer', format: 'int32', description, ...extra });
export const bool = (description: string, extra: Schema = {}): Schema => ({ type: 'boolean', description, ...extra });
/** An int-or-string field, in the form controller-gen emits (structural schemas require the anyOf). */
export const intOrString = (description: string): Schema => ({
  anyOf: [{ type: 'integer' }, { type: 'string' }],
  'x-kubernetes-int-or-string': true,
  description,
});
export const stringMap = (description: string): Schema => ({ type: 'object', description, additionalProperties: { type: 'string' } });
export const obj = (description: string, properties: Record<string, Schema>, required?: string[]): Schema =>
  required ? { type: 'object', description, properties, required } : { type: 'object', description, properties };

/** `metav1.Condition`, as Kubernetes API conventions define it (used by BlockRequest). */
export const conditionSchema: Schema = obj(
  'One aspect of the current state of the object (Kubernetes API conventions, "Typical status properties").',
  {
    type: str('Type of the condition: Complete or Failed.'),
    status: str('Status of the condition.', { enum: ['True', 'False', 'Unknown'] }),
    lastProbeTime: str('Last time the condition was probed.', { format: 'date-time' }),
    lastTransitionTime: str('Last time the condition changed from one status to another.', { format: 'date-time' }),
    reason: str('One-word CamelCase or short reason for the last transition.'),
    message: str('Human-readable details of the last transition.'),
  },
  ['type', 'status'],
);
