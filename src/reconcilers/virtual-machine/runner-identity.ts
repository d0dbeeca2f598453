// What a runner is given: a Redis credential of its own, and a ServiceAccount with no rights and
// no token (status flows back through Redis, so a runner never talks to the apiserver).
import type { V1Secret, V1ServiceAccount } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import {
  APP_NAME,
  LABEL_COMPONENT,
  LABEL_MANAGED_BY,
  LABEL_NAME,
  MANAGED_BY,
  ownerReference,
  vmLabels,
} from './naming.js';

/** VM-Operator's name for the runners' ServiceAccount; one per namespace, shared by its VMs. */
export const RUNNER_SERVICE_ACCOUNT = 'vm-runner';

export function desiredRunnerServiceAccount(namespace: string): V1ServiceAccount {
  return {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: {
      name: RUNNER_SERVICE_ACCOUNT,
      namespace,
      labels: { [LABEL_NAME]: APP_NAME, [LABEL_MANAGED_BY]: MANAGED_BY },
    },
    automountServiceAccountToken: false,
  };
}

/** The key of the runner Secret that holds the Redis URL (with the runner's credential). */
export const RUNNER_REDIS_URL_KEY = 'url';

/** `<vm>-runner-redis`: where a VM's runner publishes its state. Owned by the VM, gone with it. */
export function runnerSecretName(vmName: string): string {
  return `${vmName}-runner-redis`;
}

/**
 * The Secret the runner pod reads its Redis URL from. The manager writes one per VM, so a VM in
 * any namespace (also one made after the install) gets the runner credential without a user step.
 */
export function desiredRunnerSecret(vm: VirtualMachine, runnerRedisUrl: string): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: runnerSecretName(vm.metadata.name),
      namespace: vm.metadata.namespace,
      labels: { ...vmLabels(vm.metadata.name), [LABEL_COMPONENT]: 'runner-redis' },
      ownerReferences: [ownerReference(vm)],
    },
    type: 'Opaque',
    // `data`, not `stringData`: what is read back compares equal, so an unchanged Secret is not rewritten.
    data: { [RUNNER_REDIS_URL_KEY]: Buffer.from(runnerRedisUrl).toString('base64') },
  };
}
