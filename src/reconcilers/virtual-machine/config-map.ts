import type { V1ConfigMap } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import type { RunnerConfigInput } from '../../api/runner-config.js';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import { ownerReference, vmLabels } from './naming.js';

export const CONFIG_FILE_KEY = 'config.yaml';

/** The ConfigMap `<vm>` holding the runner's config.yaml. */
export function desiredConfigMap(vm: VirtualMachine, runnerConfig: RunnerConfigInput): V1ConfigMap {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: vm.metadata.name,
      namespace: vm.metadata.namespace,
      labels: vmLabels(vm.metadata.name),
      ownerReferences: [ownerReference(vm)],
    },
    // JSON round trip drops undefined optionals, which YAML would otherwise write as null.
    data: { [CONFIG_FILE_KEY]: stringify(JSON.parse(JSON.stringify(runnerConfig))) },
  };
}
