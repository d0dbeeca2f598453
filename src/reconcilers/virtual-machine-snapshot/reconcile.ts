// The reconcile of one VirtualMachineSnapshot: reads the caches, plans (plan.ts), makes the copy
// claims and pods, writes the status and tells what happened in Events.
import type {
  KubernetesObject,
  V1PersistentVolumeClaim,
  V1Pod,
  V1StorageClass,
} from '@kubernetes/client-node';
import { KIND, VirtualMachine } from '../../api/virtual-machine.js';
import {
  SNAPSHOT_KIND,
  SNAPSHOT_PLURAL,
  VirtualMachineSnapshot,
  parseSnapshotKey,
} from '../../api/virtual-machine-snapshot.js';
import { deletePodByUid, type KubeClients } from '../../kube/clients.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { eventObjectOf, eventRecorder } from '../events.js';
import { writeStatusIfChanged } from '../status-write.js';
import { copySecrets } from '../secret-copies.js';
import { claimWait } from '../virtual-machine/disks/claim-binding.js';
import { carryOutImports } from '../virtual-machine/disks/import-writes.js';
import { importerPod } from '../virtual-machine/disks/importer-pod.js';
import {
  APP_NAME,
  LABEL_INSTANCE,
  LABEL_NAME,
  ownerReference,
  snapshotLabels,
} from '../virtual-machine/naming.js';
import type { RunnerImage } from '../virtual-machine/runner-pod/pod.js';
import { planSnapshot, takenIntoUse } from './plan.js';

export interface SnapshotReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  /** The copies are made by `vmop import` in the runner image. */
  defaultRunnerImage: RunnerImage;
  logger: Logger;
  now?: () => Date;
}

export function createSnapshotReconciler(options: SnapshotReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());
  const record = eventRecorder(clients, logger, now);

  /** The VM's pods as the apiserver has them now: the last word before a snapshot is Ready. */
  const vmPodsNow = async (namespace: string, vmName: string) =>
    (
      await clients.core.listNamespacedPod({
        namespace,
        labelSelector: `${LABEL_NAME}=${APP_NAME},${LABEL_INSTANCE}=${vmName}`,
      })
    ).items;

  return async function reconcileSnapshot(key: string): Promise<HandlerResult> {
    const { namespace, name } = parseSnapshotKey(key);
    const raw = cache.get<KubernetesObject>(SNAPSHOT_KIND, namespace, name);
    if (!raw || raw.metadata?.deletionTimestamp) return; // its claims and pods go with it
    const parsed = VirtualMachineSnapshot.safeParse(raw);
    if (!parsed.success) {
      logger.warn({ key, issues: parsed.error.issues }, 'a snapshot the CRD admitted does not parse');
      return;
    }
    const snapshot = parsed.data;
    const vmName = snapshot.spec.virtualMachineName;
    const vmObjects = { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: vmName };
    const cachedVm = cache.get<KubernetesObject>(KIND, namespace, vmName);
    const plan = planSnapshot({
      snapshot,
      vm: cachedVm && VirtualMachine.safeParse(cachedVm).data,
      vmClaims: cache.list<V1PersistentVolumeClaim>('PersistentVolumeClaim', namespace, vmObjects),
      vmPods: cache.list<V1Pod>('Pod', namespace, vmObjects),
      copyClaims: cache.list<V1PersistentVolumeClaim>(
        'PersistentVolumeClaim',
        namespace,
        snapshotLabels(name),
      ),
      copyPods: cache.list<V1Pod>('Pod', namespace, snapshotLabels(name)),
      claimWait: (made) =>
        claimWait(made, true, {
          byName: (className) => cache.get<V1StorageClass>('StorageClass', '', className),
          byDefault: () => undefined,
        }),
      now: now(),
    });
    const object = eventObjectOf(snapshot);
    const writes: string[] = [];
    if (plan.copies)
      writes.push(
        ...(await carryOutImports(clients, namespace, plan.copies.imports, {
          importerPod: (disk) =>
            importerPod(
              {
                podName: `${name}-copy-${disk.volume}`,
                namespace,
                labels: snapshotLabels(name),
                ownerReference: ownerReference(snapshot),
              },
              disk,
              options.defaultRunnerImage,
            ),
          // One Event per snapshot says what it copied (below), not one per volume.
          recordEvent: async () => undefined,
        })),
      );
    for (const pod of plan.deletePods) {
      const { name: podName, uid } = pod.metadata!;
      if (await deletePodByUid(clients.core, { name: podName!, namespace, uid: uid! }))
        writes.push(`Pod ${podName} (deleted)`);
    }
    let status = plan.status;
    // At the cut, in the same look: the VM's provisioning Secrets as they are now.
    const secrets = status.virtualMachine?.secrets ?? [];
    if (status.phase === 'InProgress' && snapshot.status?.phase !== 'InProgress' && secrets.length > 0) {
      const { made, missing } = await copySecrets(
        clients,
        namespace,
        secrets.map((secret) => ({ from: secret.name, to: secret.copyName })),
        { labels: snapshotLabels(name), ownerReferences: [ownerReference(snapshot)] },
      );
      writes.push(...made);
      if (missing) {
        const field = secrets.find((secret) => secret.name === missing)!.field;
        status = {
          ...status,
          phase: 'Failed',
          message: `Secret ${missing} (spec.${field}.secretRef of the VM) does not exist: the VM could not be provisioned from this snapshot`,
        };
      }
    }
    // Only on the way to Ready: a Ready snapshot's VM may run again (held until now).
    if (status.phase === 'Ready' && snapshot.status?.phase !== 'Ready') {
      const user = (await vmPodsNow(namespace, vmName))[0];
      if (user)
        status = {
          ...status,
          phase: 'Failed',
          message: takenIntoUse(user),
        };
    }
    const before = snapshot.status ?? {};
    status = { ...status, observedGeneration: snapshot.metadata.generation };
    if (await writeStatusIfChanged(clients, SNAPSHOT_PLURAL, snapshot, status)) {
      writes.push('status');
      if (status.phase !== before.phase && status.phase !== 'Pending')
        await record(object, {
          type: status.phase === 'Failed' ? 'Warning' : 'Normal',
          reason:
            status.phase === 'InProgress'
              ? 'SnapshotStarted'
              : status.phase === 'Ready'
                ? 'SnapshotReady'
                : 'SnapshotFailed',
          message: status.message ?? '',
        });
    }
    if (writes.length > 0) logger.info({ key, writes, phase: status.phase }, 'reconciled');
  };
}
