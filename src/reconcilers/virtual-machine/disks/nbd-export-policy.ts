// The NetworkPolicy of a pod that exports a disk over NBD: a disk attached at runtime, or the copy
// a running VM's snapshot is written into. Its one client is the VM's QEMU, so only the VM's runner
// pods (a migration's target too) reach the NBD port; other pods, other tenants' included, cannot
// even try the export's TLS key. Made before the pod, so the pod never runs unfenced; deleted with it.
import type { V1Pod } from '@kubernetes/client-node';
import { deleteUnlessGone, createUnlessExists, type KubeClients } from '../../../kube/clients.js';
import { APP_NAME, LABEL_COMPONENT, LABEL_INSTANCE, LABEL_NAME } from '../naming.js';
import { asClientModel, type RunnerNetworkPolicy } from '../network-policy/policy.js';
import { RUNNER_COMPONENT } from '../runner-pod/pod.js';
import { NBD_PORT } from './attach-pod.js';

/** The policy of export pod `pod` (named as the pod, owned by what owns it), for VM `vmName`'s QEMU. */
export function nbdExportPolicy(pod: V1Pod, vmName: string): RunnerNetworkPolicy {
  const { name, namespace, labels, ownerReferences } = pod.metadata!;
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name, namespace, labels, ownerReferences },
    spec: {
      podSelector: { matchLabels: labels! },
      policyTypes: ['Ingress'],
      ingress: [
        {
          from: [
            {
              podSelector: {
                matchLabels: {
                  [LABEL_NAME]: APP_NAME,
                  [LABEL_INSTANCE]: vmName,
                  [LABEL_COMPONENT]: RUNNER_COMPONENT,
                },
              },
            },
          ],
          ports: [{ port: NBD_PORT, protocol: 'TCP' }],
        },
      ],
    },
  };
}

/** Makes `pod`'s policy unless it is there; whether it made it. */
export const ensureNbdExportPolicy = (clients: KubeClients, pod: V1Pod, vmName: string) =>
  createUnlessExists(() => clients.objects.create(asClientModel(nbdExportPolicy(pod, vmName))));

/** Deletes the policy of the export pod `name`; whether it deleted one. */
export const deleteNbdExportPolicy = (clients: KubeClients, namespace: string, name: string) =>
  deleteUnlessGone(() =>
    clients.objects.delete({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name, namespace },
    }),
  );
