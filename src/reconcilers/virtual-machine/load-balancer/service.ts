// The LoadBalancer Service of a VM's SPICE port (VM-Operator's loadBalancerService; pure).
// The manager may enable it for all VMs, with default labels and annotations; a VM's own
// `spec.loadBalancerService` enables it for that VM and is merged over the defaults (a null
// value removes a key), and an empty `{}` disables it for the VM.
import type { V1Service } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { LABEL_INSTANCE, LABEL_NAME, APP_NAME, ownerReference, vmLabels } from '../naming.js';

export interface LoadBalancerDefaults {
  /** A Service for every VM with SPICE, unless the VM disables it. */
  enabled: boolean;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

type Overrides = Record<string, string | null> | undefined;

function merged(defaults: Record<string, string> | undefined, overrides: Overrides) {
  const result: Record<string, string> = { ...defaults };
  for (const [key, value] of Object.entries(overrides ?? {})) {
    if (value === null) delete result[key];
    else result[key] = value;
  }
  return result;
}

/** The Service the VM should have, or undefined for none. */
export function desiredLoadBalancerService(
  vm: VirtualMachine,
  defaults: LoadBalancerDefaults,
): V1Service | undefined {
  const spice = vm.spec.vm.display.spice;
  const own = vm.spec.loadBalancerService;
  const ownIsEmpty = own !== undefined && own.labels === undefined && own.annotations === undefined;
  const enabled = own === undefined ? defaults.enabled : !ownIsEmpty;
  if (!spice || !enabled) return undefined;
  const name = vm.metadata.name;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name,
      namespace: vm.metadata.namespace,
      // The VM's labels last: the selector-relevant ones cannot be overridden.
      labels: { ...merged(defaults.labels, own?.labels), ...vmLabels(name) },
      annotations: merged(defaults.annotations, own?.annotations),
      ownerReferences: [ownerReference(vm)],
    },
    spec: {
      type: 'LoadBalancer',
      ports: [{ name: 'spice', port: spice.port, targetPort: spice.port, protocol: 'TCP' }],
      selector: { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: name },
    },
  };
}
