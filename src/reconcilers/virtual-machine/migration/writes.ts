// Carries out a migration plan's writes (plan.ts decides them): the key Secret, the runner
// migration requests (on pods, and sent to their runners), the target pod and its claims, and the tidying up. Each is safe to
// repeat: creates that find their object made are fine, deletes are by uid.
import { type V1PersistentVolumeClaim, type V1Pod } from '@kubernetes/client-node';
import {
  createUnlessExists,
  deletePodByUid,
  doneUnless,
  isConflict,
  isNotFound,
  type KubeClients,
} from '../../../kube/clients.js';
import type { ObjectCache } from '../../../kube/object-cache.js';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { ensureVmKey } from '../vm-key.js';
import type { MigrationPlan } from './plan.js';
import { LABEL_MIGRATION } from './request.js';
import { migrationAnnotation } from './target.js';
import { mergePatch } from '../../../kube/merge-patch.js';
import type { SendRunnerRequest } from '../vm-state.js';

/** The writes of `plan` (after its state was written), as lines for the reconcile's log. */
export async function carryOutMigration(
  clients: KubeClients,
  cache: ObjectCache,
  vm: VirtualMachine,
  plan: MigrationPlan,
  sendRunnerRequest?: SendRunnerRequest,
): Promise<string[]> {
  const writes: string[] = [];
  const namespace = vm.metadata.namespace!;
  if (plan.ensureSecret && (await ensureVmKey(clients, vm, cache))) writes.push('migration Secret');
  if (plan.annotate) {
    const { pod, request } = plan.annotate;
    await clients.core
      .patchNamespacedPod(
        {
          name: pod.metadata!.name!,
          namespace,
          body: { metadata: { annotations: migrationAnnotation(request) } },
        },
        mergePatch,
      )
      .then(() =>
        writes.push(`Pod ${pod.metadata!.name} (migration ${request.abort ? 'abort' : request.role})`),
      );
  }
  if (plan.send && sendRunnerRequest) {
    const { pod, request } = plan.send;
    await sendRunnerRequest(namespace, pod.metadata!.uid!, request);
    writes.push(
      `request to Pod ${pod.metadata!.name}'s runner (migration ${request.abort ? 'abort' : request.role})`,
    );
  }
  if (plan.createTarget) {
    for (const claim of plan.createTarget.claims) {
      if (
        await createUnlessExists(() =>
          clients.core.createNamespacedPersistentVolumeClaim({ namespace, body: claim }),
        )
      )
        writes.push(`PersistentVolumeClaim ${claim.metadata!.name} (migration)`);
    }
    const pod: V1Pod = plan.createTarget.pod;
    if (await createUnlessExists(() => clients.core.createNamespacedPod({ namespace, body: pod })))
      writes.push(`Pod ${pod.metadata!.name} (migration target)`);
  }
  for (const pod of plan.deletePods) {
    const { name, uid } = pod.metadata!;
    // A few seconds: the source's runner (its guest gone) or the target's (its QEMU only waiting) ends at once.
    if (await deletePodByUid(clients.core, { name: name!, namespace, uid: uid! }, { gracePeriodSeconds: 5 }))
      writes.push(`Pod ${name} deleted (migration ended)`);
  }
  const claimRef = (claim: V1PersistentVolumeClaim) => ({ name: claim.metadata!.name!, namespace });
  for (const claim of plan.deleteClaims) {
    const deleted = await doneUnless(
      () =>
        clients.core.deleteNamespacedPersistentVolumeClaim({
          ...claimRef(claim),
          body: { preconditions: { uid: claim.metadata!.uid! } },
        }),
      // Gone, or replaced by another of its name (the uid precondition failed).
      (err) => isNotFound(err) || isConflict(err),
    );
    if (deleted) writes.push(`PersistentVolumeClaim ${claim.metadata!.name} deleted (migration)`);
  }
  for (const claim of plan.keepClaims) {
    const patch = () =>
      clients.core.patchNamespacedPersistentVolumeClaim(
        { ...claimRef(claim), body: { metadata: { labels: { [LABEL_MIGRATION]: null } } } },
        mergePatch,
      );
    if (await doneUnless(patch, isNotFound))
      writes.push(`PersistentVolumeClaim ${claim.metadata!.name} (now the VM's)`);
  }
  return writes;
}
