// What the manager's watches hold, read by reconciles instead of the apiserver. A cache may lag
// the apiserver by the watch's delay; src/operator/watch-edge.ts says why that is safe.
import type { KubernetesObject } from '@kubernetes/client-node';
import { LABEL_MANAGED_BY, MANAGED_BY } from '../reconcilers/virtual-machine/naming.js';

export type CachedKind =
  | 'VirtualMachine'
  | 'VirtualMachineOperation'
  | 'VirtualMachineImage'
  | 'VirtualMachineSnapshot'
  | 'VirtualMachineRestore'
  | 'VirtualMachineExport'
  | 'VirtualMachineClone'
  | 'VirtualMachineSnapshotSchedule'
  | 'VmPool'
  | 'VirtualMachineClass'
  | 'VirtualMachineIPAddress'
  | 'VirtualMachineIPAddressLease'
  | 'StatefulSet'
  | 'ConfigMap'
  | 'Pod'
  | 'Secret'
  | 'Service'
  | 'NetworkPolicy'
  | 'ServiceAccount'
  | 'PersistentVolumeClaim'
  | 'PodDisruptionBudget'
  | 'Node'
  | 'StorageClass';

export interface ObjectCache {
  get<T extends KubernetesObject>(kind: CachedKind, namespace: string, name: string): T | undefined;
  /** The cached objects of a namespace (or all) whose labels include all of `labels`. */
  list<T extends KubernetesObject>(
    kind: CachedKind,
    namespace: string | undefined,
    labels?: Record<string, string>,
  ): T[];
}

export function hasLabels(object: KubernetesObject, labels: Record<string, string>): boolean {
  const own = object.metadata?.labels ?? {};
  return Object.entries(labels).every(([key, value]) => own[key] === value);
}

/**
 * Drops what no reconcile reads and what makes cached objects large: managedFields and kubectl's
 * last-applied copy of the whole object (client-go informers offer the same as a transform), of a
 * Node all of its status but its conditions, addresses and allocatable resources (its image list
 * alone can be hundreds of KB), and of a NetworkPolicy not vmop's its rules.
 */
export function trimForCache(object: KubernetesObject, kind = object.kind): void {
  const metadata = object.metadata;
  if (!metadata) return;
  delete metadata.managedFields;
  if (metadata.annotations?.['kubectl.kubernetes.io/last-applied-configuration'] !== undefined) {
    delete metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'];
  }
  // Of others' NetworkPolicies, only which pods they isolate counts (their rules can be long).
  const policy = object as { spec?: { podSelector?: unknown; policyTypes?: unknown } };
  if (kind === 'NetworkPolicy' && policy.spec && metadata.labels?.[LABEL_MANAGED_BY] !== MANAGED_BY)
    policy.spec = { podSelector: policy.spec.podSelector, policyTypes: policy.spec.policyTypes };
  const node = object as { status?: { conditions?: unknown; addresses?: unknown; allocatable?: unknown } };
  if (kind === 'Node' && node.status)
    node.status = {
      conditions: node.status.conditions,
      addresses: node.status.addresses,
      allocatable: node.status.allocatable,
    };
}

/**
 * What is cached of an object the manager only needs to know of (a user's Secret): its identity,
 * version and the labels it is found by, not its data. What a tenant makes of such objects then
 * costs the caches a few hundred bytes each, however large she makes them.
 */
export function keepIdentityOnly(object: KubernetesObject, labelKeys: readonly string[]): void {
  const { metadata } = object;
  if (!metadata) return;
  const labels = Object.fromEntries(
    labelKeys.flatMap((key) => (metadata.labels?.[key] === undefined ? [] : [[key, metadata.labels[key]]])),
  );
  for (const field of Object.keys(object))
    if (!['apiVersion', 'kind', 'metadata', 'type'].includes(field))
      delete (object as Record<string, unknown>)[field];
  object.metadata = {
    name: metadata.name,
    namespace: metadata.namespace,
    uid: metadata.uid,
    resourceVersion: metadata.resourceVersion,
    creationTimestamp: metadata.creationTimestamp,
    ...(metadata.deletionTimestamp && { deletionTimestamp: metadata.deletionTimestamp }),
    labels,
  };
}
