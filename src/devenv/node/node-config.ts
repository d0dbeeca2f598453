// The configuration files of one local node: containerd, the CNI network, kubelet and kube-proxy.
// Pure: paths and addresses in, file contents out.
import path from 'node:path';
import { stringify } from 'yaml';
import { CLUSTER_DNS_IP } from '../control-plane.js';
import { CLUSTER_POD_CIDR } from './network.js';

export const PAUSE_IMAGE = 'registry.k8s.io/pause:3.10';

export interface NodePaths {
  dir: string;
  containerdSocket: string;
  containerdRoot: string;
  containerdState: string;
  cniConfDir: string;
  cniIpamDir: string;
  kubeletRoot: string;
  podLogsDir: string;
}

export function nodePaths(dir: string): NodePaths {
  return {
    dir,
    containerdSocket: path.join(dir, 'containerd.sock'),
    containerdRoot: path.join(dir, 'containerd', 'root'),
    containerdState: path.join(dir, 'containerd', 'state'),
    cniConfDir: path.join(dir, 'cni', 'net.d'),
    cniIpamDir: path.join(dir, 'cni', 'ipam'),
    kubeletRoot: path.join(dir, 'kubelet'),
    podLogsDir: path.join(dir, 'pod-logs'),
  };
}

/**
 * containerd 1.6 with its CRI plugin. `restrict_oom_score_adj`: these machines lack
 * CAP_SYS_RESOURCE, so runc cannot give a sandbox kubelet's -998 (FACTS.md). Pod network
 * namespaces live under the state dir, so a node's clean-up finds all of its own.
 */
export function containerdConfig(paths: NodePaths): string {
  const q = JSON.stringify;
  return `version = 2
root = ${q(paths.containerdRoot)}
state = ${q(paths.containerdState)}
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = ${q(paths.containerdSocket)}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ${q(PAUSE_IMAGE)}
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  # A block claim's device belongs to the container's runAsUser/runAsGroup, not to the host's root:
  # vmop's importer and attach pods run as non-root (docs/installing.md asks the same of a cluster).
  device_ownership_from_security_context = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = ${q(paths.cniConfDir)}
`;
}

/**
 * A bridge, portmap, loopback; the node's pods get addresses from `podCidr`. No masquerading of
 * the bridge's own: it would hide pods from the other nodes' pods; the node's network masquerades
 * what leaves the pod network (network.ts).
 */
export function cniConfig(networkName: string, podCidr: string, paths: NodePaths): string {
  return JSON.stringify(
    {
      cniVersion: '1.0.0',
      name: networkName,
      plugins: [
        {
          type: 'bridge',
          bridge: 'cni0',
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            // Not /var/lib/cni: several nodes on one machine hand out the same range.
            dataDir: paths.cniIpamDir,
            ranges: [[{ subnet: podCidr }]],
            routes: [{ dst: '0.0.0.0/0' }],
          },
        },
        { type: 'portmap', capabilities: { portMappings: true } },
        { type: 'loopback' },
      ],
    },
    null,
    2,
  );
}

export interface KubeletConfigInput {
  paths: NodePaths;
  nodeAddress: string;
  cgroupRoot: string;
  clientCaFile: string;
}

/** KubeletConfiguration for these machines: cgroupfs on a cgroup v1 hybrid layout, no swap check. */
export function kubeletConfig(input: KubeletConfigInput): string {
  const { paths } = input;
  return stringify({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    address: input.nodeAddress,
    port: 10250,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: 10248,
    authentication: {
      anonymous: { enabled: false },
      webhook: { enabled: true },
      x509: { clientCAFile: input.clientCaFile },
    },
    authorization: { mode: 'Webhook' },
    containerRuntimeEndpoint: `unix://${paths.containerdSocket}`,
    cgroupDriver: 'cgroupfs',
    // Pods' cgroups go below this node's own root, not the machine's /kubepods.
    cgroupRoot: input.cgroupRoot,
    failCgroupV1: false,
    failSwapOn: false,
    clusterDNS: [CLUSTER_DNS_IP],
    clusterDomain: 'cluster.local',
    podLogsDir: paths.podLogsDir,
    volumePluginDir: path.join(paths.dir, 'volume-plugins'),
    serializeImagePulls: false,
    // A shared disk that is often nearly full must not make kubelet evict VMs or delete images.
    evictionHard: {
      'memory.available': '100Mi',
      'nodefs.available': '1%',
      'nodefs.inodesFree': '1%',
      'imagefs.available': '1%',
    },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    shutdownGracePeriod: '0s',
    // Five times kubelet's default: what reaches a running pod only by kubelet's periodic sync (a
    // changed ConfigMap or Secret volume) shows in tests as a minutes-long wait. vmop must not rely
    // on it (it nudges kubelet), and the tests' deadlines are far below this.
    syncFrequency: '5m',
  });
}

export function kubeProxyConfig(input: { kubeconfig: string; nodeName: string }): string {
  return stringify({
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    clientConnection: { kubeconfig: input.kubeconfig },
    mode: 'iptables',
    clusterCIDR: CLUSTER_POD_CIDR,
    hostnameOverride: input.nodeName,
    healthzBindAddress: '127.0.0.1:10256',
    metricsBindAddress: '127.0.0.1:10249',
    // Zero: leave the machine's conntrack limits alone (a network namespace may not change them).
    conntrack: { maxPerCore: 0, min: 0 },
  });
}
