// The Node object the agent registers and the Lease that keeps it alive: pure builders.
import type { V1Lease, V1Node, V1NodeCondition, V1NodeStatus } from '@kubernetes/client-node';
import { V1MicroTime } from '@kubernetes/client-node';

export const HOSTNAME_LABEL = 'kubernetes.io/hostname';
export const LOCAL_NODE_LABEL = 'vmop.jdrupes.org/local-node';
export const NODE_LEASE_NAMESPACE = 'kube-node-lease';
export const NODE_AGENT_VERSION = 'vmop-node/0.1.0';

/** Facts about the host, read once at start. */
export interface HostFacts {
  hostname: string;
  address: string;
  cpus: number;
  memoryBytes: number;
  kernelVersion: string;
  osImage: string;
  architecture: string;
  machineID: string;
  bootID: string;
}

export function nodeLabels(nodeName: string): Record<string, string> {
  return { [HOSTNAME_LABEL]: nodeName, [LOCAL_NODE_LABEL]: 'true' };
}

export function desiredNode(nodeName: string): V1Node {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name: nodeName, labels: nodeLabels(nodeName) } };
}

export interface Readiness {
  ready: boolean;
  reason: string;
  message: string;
}

const KUBERNETES_ARCHITECTURES: Record<string, string> = { x64: 'amd64', arm64: 'arm64', ia32: '386' };

export function kubernetesArchitecture(nodeArch: string): string {
  return KUBERNETES_ARCHITECTURES[nodeArch] ?? nodeArch;
}

/**
 * The node's status as kubelet would post it. lastTransitionTime survives while a condition keeps
 * its status; the pressure conditions are constant (the agent does not measure them).
 */
export function nodeStatus(
  host: HostFacts,
  readiness: Readiness,
  previous: V1NodeCondition[] | undefined,
  now: Date,
): V1NodeStatus {
  const condition = (type: string, status: string, reason: string, message: string): V1NodeCondition => {
    const before = previous?.find((c) => c.type === type);
    const lastTransitionTime =
      before?.status === status && before.lastTransitionTime ? before.lastTransitionTime : now;
    return { type, status, reason, message, lastHeartbeatTime: now, lastTransitionTime };
  };
  const resources = {
    cpu: String(host.cpus),
    memory: `${Math.floor(host.memoryBytes / 1024)}Ki`,
    pods: '110',
  };
  return {
    conditions: [
      condition('MemoryPressure', 'False', 'NodeAgentHasSufficientMemory', 'not measured by vmop node'),
      condition('DiskPressure', 'False', 'NodeAgentHasNoDiskPressure', 'not measured by vmop node'),
      condition('PIDPressure', 'False', 'NodeAgentHasSufficientPID', 'not measured by vmop node'),
      condition('Ready', readiness.ready ? 'True' : 'False', readiness.reason, readiness.message),
    ],
    addresses: [
      { type: 'InternalIP', address: host.address },
      { type: 'Hostname', address: host.hostname },
    ],
    capacity: resources,
    allocatable: resources,
    daemonEndpoints: { kubeletEndpoint: { Port: 0 } },
    nodeInfo: {
      machineID: host.machineID,
      systemUUID: '',
      bootID: host.bootID,
      kernelVersion: host.kernelVersion,
      osImage: host.osImage,
      containerRuntimeVersion: `${NODE_AGENT_VERSION} (local processes)`,
      kubeletVersion: NODE_AGENT_VERSION,
      kubeProxyVersion: '',
      operatingSystem: 'linux',
      architecture: host.architecture,
    },
  };
}

/** The node's Lease, owned by the Node so that it goes when the Node goes (as kubelet does it). */
export function nodeLease(node: V1Node, leaseDurationSeconds: number, now: Date): V1Lease {
  const name = node.metadata!.name!;
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: {
      name,
      namespace: NODE_LEASE_NAMESPACE,
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name, uid: node.metadata!.uid! }],
    },
    spec: { holderIdentity: name, leaseDurationSeconds, renewTime: new V1MicroTime(now.getTime()) },
  };
}
