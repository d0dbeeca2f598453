// The writes that make, adopt and retire a VM's runner pods (the decisions are plan.ts's).
import { type V1Pod, type V1StatefulSet } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { createUnlessExists, isConflict, isNotFound, type KubeClients } from '../../../kube/clients.js';
import { ownerReference } from '../naming.js';
import type { RunnerClaim } from '../disks/claims.js';
import { mergePatch } from '../../../kube/merge-patch.js';

/** Makes `claims` unless they exist; returns what was written, for the log. */
export async function createClaims(
  clients: KubeClients,
  namespace: string,
  claims: RunnerClaim[],
): Promise<string[]> {
  const writes: string[] = [];
  for (const { desired: body } of claims) {
    if (
      await createUnlessExists(() => clients.core.createNamespacedPersistentVolumeClaim({ namespace, body }))
    )
      writes.push(`PersistentVolumeClaim ${body.metadata!.name}`);
  }
  return writes;
}

/** Makes the claims that do not exist yet, then the pod; returns what was written, for the log. */
export async function createRunnerPod(
  clients: KubeClients,
  claims: RunnerClaim[],
  pod: V1Pod,
): Promise<string[]> {
  const namespace = pod.metadata!.namespace!;
  const writes = await createClaims(
    clients,
    namespace,
    claims.filter((c) => !c.exists),
  );
  if (await createUnlessExists(() => clients.core.createNamespacedPod({ namespace, body: pod })))
    writes.push(`Pod ${pod.metadata!.name}`);
  return writes;
}

export const isOwnedBy = (pod: V1Pod, vm: VirtualMachine) =>
  pod.metadata?.ownerReferences?.some((ref) => ref.uid === vm.metadata.uid && ref.controller) ?? false;

/** Makes the VM the controller of a pod it did not make (a StatefulSet's of vmop 0.1). */
export async function adoptRunnerPod(clients: KubeClients, pod: V1Pod, vm: VirtualMachine): Promise<void> {
  await clients.core.patchNamespacedPod(
    {
      name: pod.metadata!.name!,
      namespace: pod.metadata!.namespace!,
      body: { metadata: { uid: pod.metadata!.uid, ownerReferences: [ownerReference(vm)] } },
    },
    mergePatch,
  );
}

/**
 * Deletes a runner StatefulSet of vmop 0.1, keeping its pod (which vmop then adopts, so a running
 * VM goes on as it is) and its claims (which it never owned; new pods use them by name).
 */
export async function retireStatefulSet(clients: KubeClients, sts: V1StatefulSet): Promise<void> {
  await clients.apps
    .deleteNamespacedStatefulSet({
      name: sts.metadata!.name!,
      namespace: sts.metadata!.namespace!,
      // In the body: with a body, the apiserver ignores the query's options, and a background
      // deletion would have the garbage collector delete the pod before it is adopted.
      body: { propagationPolicy: 'Orphan', preconditions: { uid: sts.metadata!.uid } },
    })
    .catch((err: unknown) => {
      if (!isNotFound(err) && !isConflict(err)) throw err;
    });
}
