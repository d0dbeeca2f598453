import type { V1ConfigMap } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { ownerReference, vmLabels } from '../naming.js';

const CONFIG_FILE_KEY = 'config.yaml';

/** The ConfigMap `<vm>` holding the runner's config.yaml (renderRunnerConfig's text). */
export function desiredConfigMap(vm: VirtualMachine, configYaml: string): V1ConfigMap {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: vm.metadata.name,
      namespace: vm.metadata.namespace,
      labels: vmLabels(vm.metadata.name),
      ownerReferences: [ownerReference(vm)],
    },
    data: { [CONFIG_FILE_KEY]: configYaml },
  };
}
