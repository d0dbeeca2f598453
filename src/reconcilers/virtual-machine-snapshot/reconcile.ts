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
import { deletePodByUid, type KubeClients, createUnlessExists } from '../../kube/clients.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { eventRecorder } from '../events.js';
import { writeStatusWithPhaseEvent } from '../status-write.js';
import { copySecrets } from '../secret-copies.js';
import { claimWait } from '../virtual-machine/disks/claim-binding.js';
import { carryOutImports } from '../virtual-machine/disks/import-writes.js';
import { importerPod } from '../virtual-machine/disks/importer-pod.js';
import {
  APP_NAME,
  LABEL_COMPONENT,
  LABEL_INSTANCE,
  LABEL_NAME,
  LABEL_VOLUME,
  ownerReference,
  snapshotLabels,
} from '../virtual-machine/naming.js';
import { nbdExportPod, onNodeAffinity } from '../virtual-machine/disks/attach-pod.js';
import { deleteNbdExportPolicy, ensureNbdExportPolicy } from '../virtual-machine/disks/nbd-export-policy.js';
import { ensureVmKey } from '../virtual-machine/vm-key.js';
import { migrationSecretName } from '../virtual-machine/runner-pod/pod.js';
import { EXPORT_COMPONENT, exportPodName } from './running.js';
import type { RunnerImage } from '../virtual-machine/runner-pod/pod.js';
import { planSnapshot, takenIntoUse } from './plan.js';

export interface SnapshotReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  /** The copies are made by `vmop import` in the runner image. */
  defaultRunnerImage: RunnerImage;
  /** Each export pod gets a NetworkPolicy that lets only the VM's runner pods in. */
  fenceExports: boolean;
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
    const writes: string[] = [];
    const vm = cachedVm && VirtualMachine.safeParse(cachedVm).data;
    const runner = plan.status.runner;
    // A running VM's copy: the VM's key (its exports' TLS), its export pods, and its runner data
    // read on the node the VM runs on (the claim is in use there).
    const runnerNode =
      runner &&
      cache.list<V1Pod>('Pod', namespace, vmObjects).find((pod) => pod.metadata?.uid === runner.podUid)?.spec
        ?.nodeName;
    if (runner && vm && plan.status.phase === 'InProgress')
      if (await ensureVmKey(clients, vm, cache))
        writes.push(`Secret ${migrationSecretName(vm.metadata.name)} (the VM's key)`);
    for (const volume of plan.createExports ?? []) {
      const body = nbdExportPod({
        name: exportPodName(name, volume.name),
        namespace,
        labels: { ...snapshotLabels(name), [LABEL_COMPONENT]: EXPORT_COMPONENT, [LABEL_VOLUME]: volume.name },
        ownerReference: ownerReference(snapshot),
        claimName: volume.copyClaimName,
        keysSecret: migrationSecretName(vmName),
        image: options.defaultRunnerImage,
        ...(vm?.spec.tolerations && { tolerations: vm.spec.tolerations }),
      });
      if (options.fenceExports && (await ensureNbdExportPolicy(clients, body, vmName)))
        writes.push(`NetworkPolicy ${body.metadata!.name}`);
      if (await createUnlessExists(() => clients.core.createNamespacedPod({ namespace, body })))
        writes.push(`Pod ${body.metadata!.name} (exports the copy of ${volume.name})`);
    }
    if (plan.copies)
      writes.push(
        ...(await carryOutImports(clients, namespace, plan.copies.imports, {
          importerPod: (disk) =>
            onNode(
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
              runnerNode,
            ),
          // One Event per snapshot says what it copied (below), not one per volume.
          recordEvent: async () => undefined,
        })),
      );
    for (const pod of plan.deletePods) {
      const { name: podName, uid } = pod.metadata!;
      if (await deletePodByUid(clients.core, { name: podName!, namespace, uid: uid! }))
        writes.push(`Pod ${podName} (deleted)`);
      if (options.fenceExports && pod.metadata?.labels?.[LABEL_COMPONENT] === EXPORT_COMPONENT)
        if (await deleteNbdExportPolicy(clients, namespace, podName!))
          writes.push(`NetworkPolicy ${podName} (deleted)`);
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
    // Only on the way to Ready: a Ready snapshot's VM may run again (held until now). A running
    // VM's snapshot was copied by the VM's own QEMU: its pod was to be there.
    if (status.phase === 'Ready' && snapshot.status?.phase !== 'Ready' && !status.runner) {
      const user = (await vmPodsNow(namespace, vmName))[0];
      if (user)
        status = {
          ...status,
          phase: 'Failed',
          message: takenIntoUse(user),
        };
    }
    status = { ...status, observedGeneration: snapshot.metadata.generation };
    if (
      await writeStatusWithPhaseEvent(clients, record, SNAPSHOT_PLURAL, snapshot, status, {
        InProgress: 'SnapshotStarted',
        Ready: 'SnapshotReady',
        Failed: 'SnapshotFailed',
      })
    )
      writes.push('status');
    if (writes.length > 0) logger.info({ key, writes, phase: status.phase }, 'reconciled');
  };
}

/** `pod` pinned to `node` (a claim the VM's runner uses is mounted only there), when known. */
function onNode(pod: V1Pod, node: string | undefined): V1Pod {
  if (!node) return pod;
  return { ...pod, spec: { ...pod.spec!, affinity: onNodeAffinity(node) } };
}
