// A live migration's target (pure): a copy of the source pod (the same image, config, Secrets and
// shared claims, so its runner starts the very same QEMU), named for the migration, kept off the
// source's node, with its own claims for the disks only that node can use, its own snapshot key,
// and the migration request that tells its runner where the source waits.
import { ROUTED_NIC_ANNOTATION } from '../../../api/vm-network.js';
import type {
  V1Affinity,
  V1EnvVar,
  V1NodeSelectorRequirement,
  V1PersistentVolumeClaim,
  V1Pod,
} from '@kubernetes/client-node';
import { SNAPSHOT_SUFFIX_ENV, snapshotSuffixOf } from '../../../api/runner-snapshot.js';
import { MIGRATION_ANNOTATION, type MigrationRequest } from '../../../runner/migration/request.js';
import { POD_SPEC_ANNOTATION } from '../naming.js';
import { claimNames } from '../disks/claims.js';
import { LABEL_MIGRATION } from './request.js';
import { SCRAPE_ANNOTATION_PREFIX, type RunnerImage } from '../runner-pod/pod.js';

export const HOSTNAME_LABEL = 'kubernetes.io/hostname';

/** The snapshot key suffix of a runner pod (a migration target publishes under its own key). */
export function snapshotSuffixOfPod(pod: V1Pod | undefined): string {
  return pod?.spec?.containers?.[0]?.env?.find((env) => env.name === SNAPSHOT_SUFFIX_ENV)?.value ?? '';
}

/** The runner migration request a pod carries. */
export function podMigrationRequest(pod: V1Pod | undefined): MigrationRequest | undefined {
  const value = pod?.metadata?.annotations?.[MIGRATION_ANNOTATION];
  if (!value) return undefined;
  try {
    return JSON.parse(value) as MigrationRequest;
  } catch {
    return undefined;
  }
}

/** Whether the pod is a migration's target (it runs the guest only once the migration succeeded). */
export const isMigrationTarget = (pod: V1Pod) => podMigrationRequest(pod)?.role === 'target';

/** The migration request as a pod annotation value (the runner reads it from its downward API file). */
export const migrationAnnotation = (request: MigrationRequest) => ({
  [MIGRATION_ANNOTATION]: JSON.stringify(request),
});

/**
 * The claim of a copied disk on the target: the volume's own claim name, suffixed with the
 * migration's id (not the source claim's, which may be an earlier copy: names would grow).
 */
export const targetClaimName = (vmName: string, volume: string, id: string) =>
  `${claimNames(vmName, volume).current}-${id}`;

/** A claim for the copy of `source` (same size, class and mode), labelled for the migration. */
export function targetClaim(
  source: V1PersistentVolumeClaim,
  copy: { vmName: string; volume: string; id: string },
): V1PersistentVolumeClaim {
  const { metadata, spec } = source;
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: targetClaimName(copy.vmName, copy.volume, copy.id),
      namespace: metadata!.namespace,
      // The volume label too: once the migration succeeded and this label went, it backs the volume.
      labels: { ...metadata?.labels, [LABEL_MIGRATION]: copy.id },
    },
    spec: {
      accessModes: spec?.accessModes,
      volumeMode: spec?.volumeMode,
      resources: {
        requests: {
          storage: source.status?.capacity?.storage ?? spec?.resources?.requests?.storage ?? '1Gi',
        },
      },
      ...(spec?.storageClassName && { storageClassName: spec.storageClassName }),
    },
  };
}

/** `expression` added to every term of the pod's required node affinity (terms are ORed). */
function requireNode(pod: V1Pod, expression: V1NodeSelectorRequirement): V1Pod['spec'] {
  const spec = pod.spec!;
  const required = spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
  const terms = required?.nodeSelectorTerms?.length ? required.nodeSelectorTerms : [{}];
  return {
    ...spec,
    affinity: {
      ...spec.affinity,
      nodeAffinity: {
        ...spec.affinity?.nodeAffinity,
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: terms.map((term) => ({
            ...term,
            matchExpressions: [...(term.matchExpressions ?? []), expression],
          })),
        },
      },
    },
  };
}

export interface TargetPodOptions {
  name: string;
  id: string;
  /** The source runner's side channel, `host:port`. */
  sourceAddress: string;
  sourceNode: string;
  /** The node asked for (the operation's spec.migrate.nodeName). */
  requestedNode?: string;
  /** The target's claim for each copied disk, by the source's claim name. */
  claimCopies: Map<string, string>;
  /** The runner image the target runs (the source's when absent): an upgrade moves the VM onto a new one. */
  image?: RunnerImage;
  /**
   * The VM's own affinity (spec.affinity): the source pod's may carry what vmop added when it was
   * a target itself (not on the node it came from), which must not follow the VM around.
   */
  affinity?: V1Affinity;
}

/** The target pod, from the source pod as the cache has it. */
export function targetPod(source: V1Pod, options: TargetPodOptions): V1Pod {
  const { metadata } = source;
  const ownAffinity = { ...source, spec: { ...source.spec!, affinity: options.affinity } };
  const placed = requireNode(ownAffinity, {
    key: HOSTNAME_LABEL,
    ...(options.requestedNode
      ? { operator: 'In', values: [options.requestedNode] }
      : { operator: 'NotIn', values: [options.sourceNode] }),
  })!;
  const container = placed.containers[0]!;
  const env: V1EnvVar[] = [
    ...(container.env ?? []).filter((variable) => variable.name !== SNAPSHOT_SUFFIX_ENV),
    { name: SNAPSHOT_SUFFIX_ENV, value: snapshotSuffixOf(options.name) },
  ];
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: options.name,
      namespace: metadata!.namespace,
      labels: metadata?.labels,
      annotations: {
        // What the guest runs with is the source's: restartAwaitingChanges compares with it.
        ...(metadata?.annotations?.[POD_SPEC_ANNOTATION] && {
          [POD_SPEC_ANNOTATION]: metadata.annotations[POD_SPEC_ANNOTATION],
        }),
        // Prometheus finds the target's metrics as it found the source's; the node agent makes
        // the target's tap for the VM's own address as it made the source's.
        ...Object.fromEntries(
          Object.entries(metadata?.annotations ?? {}).filter(
            ([key]) => key.startsWith(SCRAPE_ANNOTATION_PREFIX) || key === ROUTED_NIC_ANNOTATION,
          ),
        ),
        ...migrationAnnotation({ id: options.id, role: 'target', source: options.sourceAddress, mirror: [] }),
      },
      ownerReferences: metadata?.ownerReferences,
    },
    spec: {
      ...placed,
      // Set by the scheduler and admission for the source; the target gets its own.
      nodeName: undefined,
      priority: undefined,
      preemptionPolicy: undefined,
      overhead: undefined,
      containers: [
        {
          ...container,
          env,
          ...(options.image && {
            image: options.image.image,
            imagePullPolicy: options.image.pullPolicy ?? container.imagePullPolicy,
          }),
        },
      ],
      volumes: placed.volumes?.map((volume) => {
        const copy =
          volume.persistentVolumeClaim && options.claimCopies.get(volume.persistentVolumeClaim.claimName);
        return copy
          ? { ...volume, persistentVolumeClaim: { ...volume.persistentVolumeClaim!, claimName: copy } }
          : volume;
      }),
    },
  };
}
