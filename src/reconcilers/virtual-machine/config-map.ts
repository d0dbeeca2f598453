import type { V1ConfigMap } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import type { RunnerConfigInput } from '../../api/runner-config.js';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import { ownerReference, vmLabels } from './naming.js';

export const CONFIG_FILE_KEY = 'config.yaml';

/**
 * Rendered configs by their JSON: most reconciles (a runner's snapshot, a status change) render an
 * unchanged config, and YAML output costs several times the JSON key. Bounded, oldest use first out.
 */
const renderedYaml = new Map<string, string>();
const RENDERED_YAML_CAPACITY = 1024;

function configYaml(runnerConfig: RunnerConfigInput): string {
  const json = JSON.stringify(runnerConfig);
  let yaml = renderedYaml.get(json);
  if (yaml === undefined) {
    // The JSON round trip drops undefined optionals, which YAML would otherwise write as null.
    yaml = stringify(JSON.parse(json));
    if (renderedYaml.size >= RENDERED_YAML_CAPACITY) renderedYaml.delete(renderedYaml.keys().next().value!);
  } else {
    renderedYaml.delete(json);
  }
  renderedYaml.set(json, yaml);
  return yaml;
}

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
    data: { [CONFIG_FILE_KEY]: configYaml(runnerConfig) },
  };
}
