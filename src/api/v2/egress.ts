/**
 * Egress: an on-demand NAT gateway in a namespace. Becomes a Deployment + Service of NAT pods;
 * `kubectl scale` and HPAs act through the scale subresource.
 *
 * @see docs/compatibility.md#egress-resource, docs/compatibility.md#egress-webhooks,
 *   docs/compatibility.md#egress-reconciler
 */
import type { V1ObjectMeta, V1PodSpec, V1SessionAffinityConfig } from '@kubernetes/client-node';
import { GROUP, VERSION } from './keys.js';
import { type KindDefinition, bool, int32, intOrString, obj, str, stringMap } from './schema.js';

/** apps/v1 DeploymentStrategy, copied to the Deployment. */
export interface EgressStrategy {
  type?: 'Recreate' | 'RollingUpdate';
  rollingUpdate?: { maxSurge?: number | string; maxUnavailable?: number | string };
}

/** Pod template of the NAT pods. A container named `egress` is the main one. */
export interface EgressPodTemplate {
  metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: V1PodSpec;
}

/** PodDisruptionBudget parameters; at most one of the two may be set. */
export interface EgressPDBSpec {
  minAvailable?: number | string;
  maxUnavailable?: number | string;
}

export interface EgressSpec {
  /** CIDRs routed through this egress (at least one). */
  destinations: string[];
  /** Number of NAT pods. Default 1, minimum 1. */
  replicas: number;
  strategy?: EgressStrategy;
  template?: EgressPodTemplate;
  /** Service session affinity. Default ClientIP (keeps a client's flows on one NAT pod). */
  sessionAffinity: 'ClientIP' | 'None';
  sessionAffinityConfig?: V1SessionAffinityConfig;
  /** Let the kernel pick the FoU source port per flow (Coil #252). Default false. */
  fouSourcePortAuto?: boolean;
  podDisruptionBudget?: EgressPDBSpec;
  /**
   * Ours (not Coil's); optional, no default: addresses the NAT pods translate client flows to
   * instead of their own pod address, at most one per family, plain unicast IP addresses in
   * canonical text (egress-validation.ts). With it the Egress keeps its clients' TCP sessions
   * across the loss of a NAT pod: every coild steers the Egress's clients to one active NAT pod
   * per address and the active pod's node routes and exports the address. Needs every client
   * node's coild to steer (`--egress-nat-steering`): a client tunnelling to the ClusterIP reaches
   * NAT pods that are not active, whose answers come back to the active one, and its flows break.
   * The controller passes it to coil-egress as `--snat-addresses`.
   * @see docs/egress-failover.md#sessions-kept-the-shared-snat-address
   */
  snatAddresses?: string[];
}

export interface EgressStatus {
  /** Available NAT pods (the scale subresource's status replicas). */
  replicas?: number;
  /** Serialized label selector of the NAT pods, for the scale subresource and HPA. */
  selector?: string;
}

export interface Egress {
  apiVersion?: string;
  kind?: string;
  metadata?: V1ObjectMeta;
  spec: EgressSpec;
  status?: EgressStatus;
}

/** Name of the main container in the NAT pod template. */
export const EGRESS_CONTAINER_NAME = 'egress';

/**
 * The pod spec is kept open (unknown fields preserved) with only `containers[].name` required:
 * Coil embeds the whole ~200 KB core/v1 PodSpec schema and must strip its descriptions to fit
 * client-side apply. The Deployment built from it is validated by the apiserver in full.
 */
const podSpecSchema = {
  type: 'object' as const,
  description: 'Spec of the NAT pods (core/v1 PodSpec). The container named "egress" is the main one.',
  'x-kubernetes-preserve-unknown-fields': true,
  required: ['containers'],
  properties: {
    containers: {
      type: 'array' as const,
      items: {
        type: 'object' as const,
        'x-kubernetes-preserve-unknown-fields': true,
        required: ['name'],
        properties: { name: str('Name of the container.') },
      },
    },
  },
};

/** Schema and names of the Egress CRD. */
export const EgressKind: KindDefinition = {
  group: GROUP,
  version: VERSION,
  kind: 'Egress',
  listKind: 'EgressList',
  plural: 'egresses',
  singular: 'egress',
  shortNames: ['eg'],
  categories: ['coil'],
  namespaced: true,
  description: 'Egress is the Schema for the egresses API: an on-demand NAT gateway for client pods that opt in by annotation.',
  subresources: {
    status: true,
    scale: { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.replicas', labelSelectorPath: '.status.selector' },
  },
  printerColumns: [
    { name: 'Desired', type: 'integer', jsonPath: '.spec.replicas' },
    { name: 'Available', type: 'integer', jsonPath: '.status.replicas' },
    { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
  ],
  schema: obj('Egress is the Schema for the egresses API.', {
    apiVersion: str('APIVersion defines the versioned schema of this representation of an object.'),
    kind: str('Kind is a string value representing the REST resource this object represents.'),
    metadata: { type: 'object' },
    spec: obj('EgressSpec defines the desired state of Egress.', {
      destinations: {
        type: 'array',
        description: 'Destinations is a list of IP networks in CIDR format routed through this egress.',
        minItems: 1,
        items: { type: 'string' },
      },
      replicas: int32('Replicas is the desired number of egress (SNAT) pods.', { default: 1, minimum: 1 }),
      strategy: obj('Strategy describes how to replace existing pods with new ones (apps/v1 DeploymentStrategy).', {
        type: str('Type of deployment: Recreate or RollingUpdate.', { enum: ['Recreate', 'RollingUpdate'] }),
        rollingUpdate: obj('Rolling update config params, present only if type is RollingUpdate.', {
          maxSurge: intOrString('Maximum number of pods scheduled above the desired number of pods.'),
          maxUnavailable: intOrString('Maximum number of pods that can be unavailable during the update.'),
        }),
      }),
      template: obj('Template is an optional template of the egress pods.', {
        metadata: obj('Labels and annotations of the egress pods.', {
          annotations: stringMap('Annotations of the egress pods.'),
          labels: stringMap('Labels of the egress pods.'),
        }),
        spec: podSpecSchema,
      }),
      sessionAffinity: str('SessionAffinity of the Service: ClientIP or None.', { enum: ['ClientIP', 'None'], default: 'ClientIP' }),
      sessionAffinityConfig: obj('SessionAffinityConfig of the Service (core/v1 SessionAffinityConfig).', {
        clientIP: obj('Configuration of client-IP based session affinity.', {
          timeoutSeconds: int32('Seconds of ClientIP session stickiness; 0 < value <= 86400.', { minimum: 1, maximum: 86400 }),
        }),
      }),
      fouSourcePortAuto: bool('FouSourcePortAuto lets the kernel choose the FoU source port per flow.', { default: false }),
      podDisruptionBudget: obj('PodDisruptionBudget of the egress pods; at most one field may be set.', {
        minAvailable: intOrString('MinAvailable is the minimum number (or percentage) of available egress pods.'),
        maxUnavailable: intOrString('MaxUnavailable is the maximum number (or percentage) of unavailable egress pods.'),
      }),
      snatAddresses: {
        type: 'array',
        description:
          'SnatAddresses are addresses the NAT pods translate client flows to instead of their own pod address, at most one per family. ' +
          "With it the Egress keeps its clients' TCP sessions across the loss of a NAT pod: every coild steers the Egress's clients to one active NAT pod per address " +
          "and the active pod's node routes and exports the address (docs/egress-failover.md). Needs every client node's coild to steer (--egress-nat-steering): " +
          'flows of a client tunnelling to the Service ClusterIP break.',
        maxItems: 2,
        items: { type: 'string' },
        'x-kubernetes-list-type': 'set',
      },
    }, ['destinations']),
    status: obj('EgressStatus defines the observed state of Egress.', {
      replicas: int32('Replicas is the number of available egress pods.'),
      selector: str('Selector is a serialized label selector of the egress pods, for the scale subresource.'),
    }),
  }, ['spec']),
};
