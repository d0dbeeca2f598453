// The reconcile of one VirtualMachineClone: reads the caches, plans (plan.ts), creates the new VM
// and writes the status with an Event.
import type { KubernetesObject } from '@kubernetes/client-node';
import { API_VERSION, GROUP, KIND, PLURAL, VERSION } from '../../api/virtual-machine.js';

const vmApiVersion = { apiVersion: API_VERSION, kind: KIND };
import {
  CLONE_KIND,
  CLONE_PLURAL,
  VirtualMachineClone,
  parseCloneKey,
  type CloneStatus,
} from '../../api/virtual-machine-clone.js';
import { SNAPSHOT_KIND, VirtualMachineSnapshot } from '../../api/virtual-machine-snapshot.js';
import { isConflict, type KubeClients } from '../../kube/clients.js';

import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { eventRecorder } from '../events.js';
import { writeStatusWithPhaseEvent } from '../status-write.js';
import { copySecrets } from '../secret-copies.js';
import { LABEL_MANAGED_BY, MANAGED_BY, ownerReference } from '../virtual-machine/naming.js';
import { mergePatch } from '../../kube/merge-patch.js';
import { planClone } from './plan.js';

export interface CloneReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  logger: Logger;
  now?: () => Date;
}

export function createCloneReconciler(options: CloneReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());
  const record = eventRecorder(clients, logger, now);

  return async function reconcileClone(key: string): Promise<HandlerResult> {
    const { namespace, name } = parseCloneKey(key);
    const raw = cache.get<KubernetesObject>(CLONE_KIND, namespace, name);
    if (!raw || raw.metadata?.deletionTimestamp) return;
    const parsed = VirtualMachineClone.safeParse(raw);
    if (!parsed.success) {
      logger.warn({ key, issues: parsed.error.issues }, 'a clone the CRD admitted does not parse');
      return;
    }
    const clone = parsed.data;
    const cachedSnapshot = cache.get<KubernetesObject>(
      SNAPSHOT_KIND,
      namespace,
      clone.spec.virtualMachineSnapshotName,
    );
    const newName = clone.spec.newVirtualMachineName;
    const existing = cache.get<KubernetesObject>(KIND, namespace, newName);
    const plan = planClone({
      clone,
      snapshot: cachedSnapshot && VirtualMachineSnapshot.safeParse(cachedSnapshot).data,
      existing,
      now: now(),
    });
    const writes: string[] = [];
    let status: CloneStatus = { ...plan.status, observedGeneration: clone.metadata.generation };
    // The VM's provisioning Secrets first: a VM made before them would fail to start.
    const { made, missing } = await copySecrets(clients, namespace, plan.secrets, {
      labels: { [LABEL_MANAGED_BY]: MANAGED_BY },
    });
    writes.push(...made);
    if (missing)
      status = {
        ...status,
        phase: 'Failed',
        message: `Secret ${missing}, the snapshot's copy of the VM's provisioning data, does not exist`,
      };
    let vmUid = existing?.metadata?.uid;
    if (plan.create && !missing) {
      const body = plan.create;
      let created: KubernetesObject;
      try {
        created = (await clients.customObjects.createNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          plural: PLURAL,
          namespace,
          body,
        })) as KubernetesObject;
      } catch (err) {
        // Another VM of that name came first (the cache is behind): the next look says whose it is.
        if (isConflict(err)) throw new Error(`a VirtualMachine ${newName} exists: looking again`);
        throw err;
      }
      vmUid = created.metadata?.uid;
      writes.push(`VirtualMachine ${newName}`);
    }
    // The VM owns its Secrets (they go with it), whichever look made it.
    if (vmUid && !missing)
      for (const { to } of plan.secrets) {
        await clients.core.patchNamespacedSecret(
          {
            namespace,
            name: to,
            body: {
              metadata: {
                ownerReferences: [
                  ownerReference({ ...vmApiVersion, metadata: { name: newName, uid: vmUid } }),
                ],
              },
            },
          },
          mergePatch,
        );
      }
    if (
      await writeStatusWithPhaseEvent(clients, record, CLONE_PLURAL, clone, status, {
        Completed: 'Cloned',
        Failed: 'CloneFailed',
      })
    )
      writes.push('status');
    if (writes.length > 0) logger.info({ key, writes, phase: status.phase }, 'reconciled');
  };
}
