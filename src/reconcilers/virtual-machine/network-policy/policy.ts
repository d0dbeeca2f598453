// The NetworkPolicy of a VM's runner pods (pure). A runner pod listens for vmop itself (metrics
// and readiness, the migration channel, QEMU's migration and NBD, SPICE) and for the guest (its
// forwarded ports). NetworkPolicies only ever add what may pass, so the listeners are kept from
// other tenants by isolating the pods: vmop's listeners admit the VM's own pods (a migration's
// peer), the peers the admin names (managers, the GUI; Prometheus for metrics), and no one else.
// The guest's ports stay as open as a pod's would be: to everyone while no policy of the
// namespace selects the pod, and then only as those policies say.
import type { KubernetesObject, V1NetworkPolicy } from '@kubernetes/client-node';
import type { NetworkPolicyPeer } from '../../../api/kubernetes-types.js';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { matchesLabelSelector } from '../../../kube/label-selector.js';
import {
  APP_NAME,
  LABEL_COMPONENT,
  LABEL_INSTANCE,
  LABEL_NAME,
  ownerReference,
  vmLabels,
} from '../naming.js';
import { RUNNER_COMPONENT, RUNNER_METRICS_PORT } from '../runner-pod/pod.js';

export interface RunnerNetworkPolicySettings {
  /** Whether VMs' runner pods get a NetworkPolicy at all. */
  enabled: boolean;
  /** Who reaches every listener of a runner pod: vmop's managers and web GUI. */
  ingressFrom: NetworkPolicyPeer[];
  /** Who reaches the runner's metrics port: Prometheus. */
  metricsFrom: NetworkPolicyPeer[];
}

/** Ports and rules as the apiserver has them (client-node's model names `from` `_from`). */
interface PolicyPort {
  port: number;
  protocol: string;
}
interface IngressRule {
  from?: NetworkPolicyPeer[];
  ports?: PolicyPort[];
}
export type RunnerNetworkPolicy = KubernetesObject & {
  spec: {
    podSelector: { matchLabels: Record<string, string> };
    policyTypes: string[];
    ingress: IngressRule[];
  };
};

/**
 * The policy as client-node writes it: its model names a rule's `from` `_from` (and drops a `from`
 * it does not know: a rule without peers lets everyone in).
 */
export function asClientModel(policy: RunnerNetworkPolicy): KubernetesObject {
  const ingress = policy.spec.ingress.map(({ from, ...rule }) => ({ ...rule, ...(from && { _from: from }) }));
  return { ...policy, spec: { ...policy.spec, ingress } } as KubernetesObject;
}

/** A cached policy's spec as the apiserver has it (a listed one came through client-node's model). */
export function asWireSpec(policy: V1NetworkPolicy): unknown {
  const spec = policy.spec as
    (V1NetworkPolicy['spec'] & { ingress?: Array<Record<string, unknown>> }) | undefined;
  if (!spec?.ingress) return spec;
  const ingress = spec.ingress.map(({ _from, ...rule }) => ({
    ...rule,
    ...(_from !== undefined && { from: _from }),
  }));
  return { ...spec, ingress };
}

export const runnerNetworkPolicyName = (vmName: string) => `vmop-runner-${vmName}`;

/** Whether `policy` selects pods with `labels` for ingress (its policyTypes default to Ingress). */
export function isolatesIngress(policy: V1NetworkPolicy, labels: Record<string, string>): boolean {
  const spec = policy.spec;
  if (!spec) return false;
  const types = spec.policyTypes ?? ['Ingress'];
  return types.includes('Ingress') && matchesLabelSelector(spec.podSelector ?? {}, labels);
}

/** The guest's forwarded ports, as NetworkPolicy ports. */
function guestPorts(vm: VirtualMachine): PolicyPort[] {
  return vm.spec.vm.networks.flatMap((network) =>
    (network.user?.ports ?? []).map((port) => ({ port: port.port, protocol: port.protocol })),
  );
}

/**
 * The policy `vm`'s runner pods should have. `isolatedByNamespace`: a policy of the namespace (not
 * vmop's) selects them, so the guest's ports follow that one alone. `spiceForAll`: the VM's SPICE
 * port is published by a LoadBalancer Service (whoever reaches it may try its ticket).
 */
export function desiredRunnerNetworkPolicy(
  vm: VirtualMachine,
  settings: RunnerNetworkPolicySettings,
  facts: { isolatedByNamespace: boolean; spiceForAll: boolean },
): RunnerNetworkPolicy | undefined {
  if (!settings.enabled) return undefined;
  const name = vm.metadata.name;
  const openPorts = [
    ...(facts.isolatedByNamespace ? [] : guestPorts(vm)),
    ...(facts.spiceForAll && vm.spec.vm.display.spice
      ? [{ port: vm.spec.vm.display.spice.port, protocol: 'TCP' }]
      : []),
  ];
  const ingress: IngressRule[] = [
    // The VM's own pods: a migration's source and target talk to each other on every listener.
    { from: [{ podSelector: { matchLabels: { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: name } } }] },
    ...(settings.ingressFrom.length > 0 ? [{ from: settings.ingressFrom }] : []),
    ...(settings.metricsFrom.length > 0
      ? [{ from: settings.metricsFrom, ports: [{ port: RUNNER_METRICS_PORT, protocol: 'TCP' }] }]
      : []),
    ...(openPorts.length > 0 ? [{ ports: openPorts }] : []),
  ];
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: {
      name: runnerNetworkPolicyName(name),
      namespace: vm.metadata.namespace,
      labels: vmLabels(name),
      ownerReferences: [ownerReference(vm)],
    },
    spec: {
      podSelector: {
        matchLabels: { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: name, [LABEL_COMPONENT]: RUNNER_COMPONENT },
      },
      policyTypes: ['Ingress'],
      ingress,
    },
  };
}
