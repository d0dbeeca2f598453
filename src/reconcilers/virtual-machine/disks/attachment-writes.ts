// The writes of disks attached at runtime (the decisions are attachments.ts's): claims, the
// VM's key Secret (the exports' TLS), helper pods made and deleted.
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { deletePodByUid, type KubeClients, createUnlessExists } from '../../../kube/clients.js';
import { desiredAttachPod } from './attach-pod.js';
import { deleteNbdExportPolicy, ensureNbdExportPolicy } from './nbd-export-policy.js';
import type { DiskAttachments } from './attachments.js';
import { ensureVmKey } from '../vm-key.js';
import type { RunnerImage } from '../runner-pod/pod.js';

/**
 * Carries out `plan`; returns what was written, for the log. `fenced`: each export pod gets a
 * NetworkPolicy that lets only the VM's runner pods in (the manager's `--runner-network-policy`).
 */
export async function carryOutAttachments(
  clients: KubeClients,
  vm: VirtualMachine,
  plan: DiskAttachments,
  image: RunnerImage,
  fenced: boolean,
): Promise<string[]> {
  const namespace = vm.metadata.namespace!;
  const done: string[] = [];
  for (const claim of plan.createClaims) {
    const body = claim.desired;
    if (
      await createUnlessExists(() => clients.core.createNamespacedPersistentVolumeClaim({ namespace, body }))
    )
      done.push(`PersistentVolumeClaim ${claim.claimName} (to attach)`);
  }
  if (plan.ensureSecret && (await ensureVmKey(clients, vm))) done.push('key Secret (disk exports)');
  for (const disk of plan.createPods) {
    const body = desiredAttachPod(vm, disk, disk.nodeName, image);
    if (fenced && (await ensureNbdExportPolicy(clients, body, vm.metadata.name)))
      done.push(`NetworkPolicy ${body.metadata!.name}`);
    if (await createUnlessExists(() => clients.core.createNamespacedPod({ namespace, body })))
      done.push(`Pod ${body.metadata!.name} (exports ${disk.volume})`);
  }
  for (const stale of plan.deletePods) {
    const { name: podName, uid } = stale.metadata!;
    if (await deletePodByUid(clients.core, { name: podName!, namespace, uid: uid! }))
      done.push(`Pod ${podName} (deleted)`);
    if (fenced && (await deleteNbdExportPolicy(clients, namespace, podName!)))
      done.push(`NetworkPolicy ${podName} (deleted)`);
  }
  return done;
}
