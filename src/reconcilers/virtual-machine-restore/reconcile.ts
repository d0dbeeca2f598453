// The reconcile of one VirtualMachineRestore: reads the caches, plans (plan.ts), stops or starts the
// VM when the plan says so, makes and removes the copying pods, writes the status with Events.
import type { KubernetesObject, V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { KIND, VirtualMachine } from '../../api/virtual-machine.js';
import {
  RESTORE_KIND,
  RESTORE_PLURAL,
  VirtualMachineRestore,
  parseRestoreKey,
  type RestoreStatus,
} from '../../api/virtual-machine-restore.js';
import { SNAPSHOT_KIND, VirtualMachineSnapshot } from '../../api/virtual-machine-snapshot.js';
import { deletePodByUid, type KubeClients, createUnlessExists } from '../../kube/clients.js';
import { mergePatch } from '../../kube/merge-patch.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { eventRecorder } from '../events.js';
import { writeStatusWithPhaseEvent } from '../status-write.js';
import { importerPod } from '../virtual-machine/disks/importer-pod.js';
import {
  APP_NAME,
  LABEL_INSTANCE,
  LABEL_NAME,
  ownerReference,
  restoreLabels,
  vmApiRef,
} from '../virtual-machine/naming.js';
import type { RunnerImage } from '../virtual-machine/runner-pod/pod.js';
import { planRestore } from './plan.js';

export interface RestoreReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  /** The copies are written by `vmop import` in the runner image. */
  defaultRunnerImage: RunnerImage;
  logger: Logger;
  now?: () => Date;
}

const REASONS = {
  InProgress: 'RestoreStarted',
  Completed: 'Restored',
  Failed: 'RestoreFailed',
} as const;

export function createRestoreReconciler(options: RestoreReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());
  const record = eventRecorder(clients, logger, now);

  return async function reconcileRestore(key: string): Promise<HandlerResult> {
    const { namespace, name } = parseRestoreKey(key);
    const raw = cache.get<KubernetesObject>(RESTORE_KIND, namespace, name);
    if (!raw || raw.metadata?.deletionTimestamp) return; // its pods go with it
    const parsed = VirtualMachineRestore.safeParse(raw);
    if (!parsed.success) {
      logger.warn({ key, issues: parsed.error.issues }, 'a restore the CRD admitted does not parse');
      return;
    }
    const restore = parsed.data;
    const { virtualMachineName: vmName, virtualMachineSnapshotName } = restore.spec;
    const vmObjects = { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: vmName };
    const cachedVm = cache.get<KubernetesObject>(KIND, namespace, vmName);
    const cachedSnapshot = cache.get<KubernetesObject>(SNAPSHOT_KIND, namespace, virtualMachineSnapshotName);
    const plan = planRestore({
      restore,
      vm: cachedVm && VirtualMachine.safeParse(cachedVm).data,
      snapshot: cachedSnapshot && VirtualMachineSnapshot.safeParse(cachedSnapshot).data,
      vmClaims: cache.list<V1PersistentVolumeClaim>('PersistentVolumeClaim', namespace, vmObjects),
      vmPods: cache.list<V1Pod>('Pod', namespace, vmObjects),
      copyPods: cache.list<V1Pod>('Pod', namespace, restoreLabels(name)),
      now: now(),
    });
    const writes: string[] = [];
    for (const disk of plan.startCopies) {
      const body = importerPod(
        {
          podName: `${name}-restore-${disk.volume}`,
          namespace,
          labels: restoreLabels(name),
          ownerReference: ownerReference(restore),
        },
        disk,
        options.defaultRunnerImage,
      );
      if (await createUnlessExists(() => clients.core.createNamespacedPod({ namespace, body })))
        writes.push(`Pod ${body.metadata!.name} (writes back ${disk.volume})`);
    }
    for (const pod of plan.deletePods) {
      const { name: podName, uid } = pod.metadata!;
      if (await deletePodByUid(clients.core, { name: podName!, namespace, uid: uid! }))
        writes.push(`Pod ${podName} (deleted)`);
    }
    const status: RestoreStatus = { ...plan.status, observedGeneration: restore.metadata.generation };
    if (await writeStatusWithPhaseEvent(clients, record, RESTORE_PLURAL, restore, status, REASONS))
      writes.push('status');
    // After the status, which says why: a VM stopped for the restore, or started again after it.
    if (plan.vmState) {
      await clients.customObjects.patchNamespacedCustomObject(
        { ...vmApiRef(namespace, vmName), body: { spec: { vm: { state: plan.vmState } } } },
        mergePatch,
      );
      writes.push(`VirtualMachine ${vmName} (${plan.vmState})`);
    }
    if (writes.length > 0) logger.info({ key, writes, phase: status.phase }, 'reconciled');
  };
}
