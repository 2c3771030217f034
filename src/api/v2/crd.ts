/**
 * Builds apiextensions.k8s.io/v1 CustomResourceDefinitions from the kind definitions of this
 * folder: the one source of truth for `charts/coil/templates/crds/` (written by hack/generate.ts) and for
 * the CRDs that tests install.
 */
import { AddressBlockKind } from './addressblock.js';
import { AddressPoolKind } from './addresspool.js';
import { BlockRequestKind } from './blockrequest.js';
import { EgressKind } from './egress.js';
import type { KindDefinition } from './schema.js';

/** Every Coil kind, in the order their CRD files are written. */
export const ALL_KINDS: readonly KindDefinition[] = [AddressPoolKind, AddressBlockKind, BlockRequestKind, EgressKind];

/** A CRD object ready to be serialised or sent to the apiserver. */
export interface CustomResourceDefinition {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: { name: string; labels?: Record<string, string> };
  spec: Record<string, unknown>;
}

/** The CRD of one kind: served and storage version, structural schema, subresources, columns. */
export function crdFor(def: KindDefinition): CustomResourceDefinition {
  const version: Record<string, unknown> = {
    name: def.version,
    served: true,
    storage: true,
    schema: { openAPIV3Schema: { ...def.schema, description: def.description } },
  };
  if (def.subresources) {
    const sub: Record<string, unknown> = {};
    if (def.subresources.status) sub.status = {};
    if (def.subresources.scale) sub.scale = { ...def.subresources.scale };
    version.subresources = sub;
  }
  if (def.printerColumns?.length) version.additionalPrinterColumns = def.printerColumns.map((c) => ({ ...c }));
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${def.plural}.${def.group}`, labels: { 'app.kubernetes.io/name': 'coil' } },
    spec: {
      group: def.group,
      names: {
        kind: def.kind,
        listKind: def.listKind,
        plural: def.plural,
        singular: def.singular,
        shortNames: [...def.shortNames],
        categories: [...def.categories],
      },
      scope: def.namespaced ? 'Namespaced' : 'Cluster',
      versions: [version],
    },
  };
}

/** All Coil CRDs. */
export function coilCrds(): CustomResourceDefinition[] {
  return ALL_KINDS.map(crdFor);
}
