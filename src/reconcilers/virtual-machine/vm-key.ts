// The VM's pre-shared key (`identity:hex`), one Secret per VM: QEMU's TLS-PSK credentials and the
// runners' side channel in a migration, and the TLS of its disk exports (runtime attachments,
// snapshot copies). Whichever reconcile needs it first makes it; it goes with the VM.
import { randomBytes } from 'node:crypto';
import type { V1Secret } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import type { KubeClients } from '../../kube/clients.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import { LABEL_COMPONENT, ownerReference, vmLabels } from './naming.js';
import { migrationSecretName } from './runner-pod/pod.js';
import { createUnlessExists } from '../../kube/clients.js';

export function vmKeySecret(vm: VirtualMachine): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: migrationSecretName(vm.metadata.name),
      namespace: vm.metadata.namespace,
      labels: { ...vmLabels(vm.metadata.name), [LABEL_COMPONENT]: 'migration-keys' },
      ownerReferences: [ownerReference(vm)],
    },
    stringData: { 'keys.psk': `vmop:${randomBytes(32).toString('hex')}\n` },
  };
}

/** Makes the VM's key Secret unless the cache (when given) or the apiserver has it; whether it made it. */
export async function ensureVmKey(
  clients: KubeClients,
  vm: VirtualMachine,
  cache?: ObjectCache,
): Promise<boolean> {
  const namespace = vm.metadata.namespace!;
  if (cache?.get<V1Secret>('Secret', namespace, migrationSecretName(vm.metadata.name))) return false;
  return createUnlessExists(() => clients.core.createNamespacedSecret({ namespace, body: vmKeySecret(vm) }));
}
