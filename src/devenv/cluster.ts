// A whole Kubernetes on this machine: the control plane, N real nodes (containerd, kubelet,
// kube-proxy), each in its own network namespace with its own pod range, on one cluster network;
// cluster DNS; a default StorageClass of node-local volumes and a shared one. Free ports and
// addresses, a temp dir, and nothing left behind on stop. vmop itself is not installed: `vmop dev`
// runs it from the checkout, the chart's tests install the chart.
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import {
  AppsV1Api,
  KubernetesObjectApi,
  PatchStrategy,
  type KubeConfig,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { createLogger, type Logger } from '../util/logger.js';
import { clusterDnsObjects } from './cluster-dns.js';
import { startControlPlane, type ControlPlane } from './control-plane.js';
import { provideImageRepository } from './image-repository.js';
import { ensureLocalImages, type LocalImages } from './images.js';
import { startLocalVolumeProvisioner, storageClassObjects } from './local-volumes.js';
import {
  createClusterNetwork,
  cutNodeLink,
  deleteClusterNetwork,
  type ClusterNetwork,
} from './node/network.js';
import { nodeCleanupScript, startNode, type LocalNode } from './node/node.js';
import { removeUnmountedDir, startProcessGroup } from './process-group.js';
import { ensureTestGuest } from './test-guest.js';

export interface Cluster {
  controlPlane: ControlPlane;
  kubeConfig: KubeConfig;
  kubeconfigPath: string;
  /** The nodes, named vmop-node-1 … vmop-node-N, in zones zone-1 … zone-N. */
  nodes: LocalNode[];
  /** The first node (the only one of a single-node cluster). */
  node: LocalNode;
  network: ClusterNetwork;
  /** Cuts node i's (0-based) link to the cluster network, or restores it. */
  setNodeLink(node: number, up: boolean): Promise<void>;
  images: LocalImages;
  /** A directory with the test guest under `test-guest/`, for image repository PVs. */
  imageRepositoryDir: string;
  /** Gives `namespace` the PVC `vmop-image-repository` on imageRepositoryDir. */
  provideImageRepository(namespace: string): Promise<void>;
  dir: string;
  /** The cgroup of its process group: every process of the control plane and the nodes is in it. */
  processGroup: string;
  /** Stops the node (containers get `graceMs` to end), then the control plane; removes everything. */
  stop(graceMs?: number): Promise<void>;
}

export interface StartClusterOptions {
  /** How many nodes (default 1). */
  nodes?: number;
  /**
   * The images each node imports before its kubelet starts (the pause and CoreDNS images always);
   * default every local image. Each costs seconds a node.
   */
  images?: Array<'manager' | 'runner' | 'redis'>;
  /** Subnets of VMs' own addresses: the nodes' agents keep the pods' masquerading off them. */
  vmCidrs?: string[];
  /** Whether each node runs vmop's node agent as a service (default); false: the chart's DaemonSet is to. */
  nodeAgents?: boolean;
  /** Whether the nodes enforce NetworkPolicies (kube-router's firewall on each). */
  networkPolicies?: boolean;
  /** Called when a process of the control plane or a node's service was started again by its supervisor. */
  onRestart?: () => void;
  dir?: string;
  logger?: Logger;
}

/** The names of a cluster's nodes. */
export const nodeNames = (count: number) => Array.from({ length: count }, (_, i) => `vmop-node-${i + 1}`);

const FIELD_MANAGER = 'vmop-devenv';
const run = promisify(execFile);

export async function startCluster(options: StartClusterOptions = {}): Promise<Cluster> {
  const logger = options.logger ?? createLogger('cluster');
  const startedAt = Date.now();
  const ownsDir = options.dir === undefined;
  const dir = options.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'vmop-cluster-')));
  await mkdir(dir, { recursive: true });
  const count = options.nodes ?? 1;
  const names = nodeNames(count);
  const [images, guest] = await Promise.all([ensureLocalImages(logger), ensureTestGuest()]);
  const nodeImages = options.images ?? ['manager', 'runner', 'redis'];
  const nodeDirs = names.map((name) => path.join(dir, name));
  const sharedVolumes = path.join(dir, 'shared-volumes');
  const network = await createClusterNetwork(count);
  const cleanup = path.join(dir, 'cleanup.sh');
  await writeFile(cleanup, clusterCleanupScript(nodeDirs, sharedVolumes, network), { mode: 0o755 });
  // One process group for every process of the cluster: should this process die, its reaper kills it, runs the
  // clean-up (each node's mounts, loop devices, network namespace and cgroups; the shared volumes;
  // the cluster network) and removes the directory.
  const group = await startProcessGroup({
    name: 'cluster',
    removeDir: ownsDir ? dir : undefined,
    cleanupScript: cleanup,
    logger,
  });
  // Last of all: whatever is left (the shared volumes' loop devices, the namespaces).
  const stack: Array<() => Promise<void>> = [
    () => run('sh', [cleanup]).then(() => undefined),
    () => deleteClusterNetwork(network),
  ];
  const unwind = async () => {
    for (const stop of stack.reverse())
      await stop().catch((err: unknown) => logger.warn({ err }, 'stop failed'));
    await group.release();
    if (ownsDir) await removeUnmountedDir(dir);
  };
  try {
    const controlPlane = await startControlPlane({
      address: network.hostAddress,
      nodeNames: names,
      dir: path.join(dir, 'control-plane'),
      group,
      onRestart: options.onRestart,
      logger,
    });
    stack.push(() => controlPlane.stop());
    const kubeConfig = controlPlane.kubeConfig;
    let graceMs: number | undefined;
    const nodes: LocalNode[] = [];
    // One after the other: each imports the images, which the two cores do no faster at once.
    for (const [i, credentials] of controlPlane.nodes.entries()) {
      const node = await startNode({
        kubeConfig,
        credentials,
        network: network.nodes[i]!,
        labels: { 'topology.kubernetes.io/zone': `zone-${i + 1}` },
        vmCidrs: options.vmCidrs,
        agent: options.nodeAgents,
        networkPolicies: options.networkPolicies,
        onRestart: options.onRestart,
        images: [images.pause, images.coredns, ...nodeImages.map((name) => images[name])].map(
          (image) => image.archive,
        ),
        dir: nodeDirs[i],
        group,
        logger,
      });
      nodes.push(node);
      stack.push(() => node.stop(graceMs));
    }

    const provisioner = startLocalVolumeProvisioner({
      kubeConfig,
      // Below each node's directory: its clean-up detaches the loop devices of what is there.
      nodes: nodes.map((node, i) => ({ name: node.name, volumeDir: path.join(nodeDirs[i]!, 'volumes') })),
      sharedDir: sharedVolumes,
      logger,
    });
    await provisioner.start();
    stack.push(() => provisioner.stop());
    await applyObjects(kubeConfig, [...storageClassObjects(), ...clusterDnsObjects(images.coredns.ref)]);

    const imageRepositoryDir = path.join(dir, 'image-repository');
    await mkdir(imageRepositoryDir, { recursive: true });
    // A copy, not a link: the runner container sees the PV's directory, not this machine's paths.
    await cp(guest.dir, path.join(imageRepositoryDir, 'test-guest'), { recursive: true });

    await waitForDeployment(kubeConfig, 'kube-system', 'coredns');
    logger.info(
      { dir, server: controlPlane.server, nodes: count, ms: Date.now() - startedAt },
      'cluster ready',
    );
    let stopping: Promise<void> | undefined;
    return {
      controlPlane,
      kubeConfig,
      kubeconfigPath: controlPlane.kubeconfigPath,
      nodes,
      node: nodes[0]!,
      network,
      setNodeLink: (node, up) => cutNodeLink(network, node, up),
      images,
      imageRepositoryDir,
      provideImageRepository: (namespace) =>
        provideImageRepository({ kubeConfig, namespace, hostDir: imageRepositoryDir }),
      dir,
      processGroup: group.cgroup,
      stop: (grace) => {
        graceMs = grace;
        return (stopping ??= unwind().then(() => logger.info({ dir }, 'cluster stopped')));
      },
    };
  } catch (err) {
    await unwind();
    throw err;
  }
}

/** The network namespaces and the interface of this machine that the cluster made. */
export function clusterNetworkTraces({ network }: Pick<Cluster, 'network'>) {
  return {
    namespaces: [network.switchNetns, ...network.nodes.map((node) => node.netns)],
    hostInterface: network.hostInterface,
  };
}

/** What the cluster leaves that stopping its processes does not remove; harmless to run twice. */
function clusterCleanupScript(nodeDirs: string[], sharedVolumes: string, network: ClusterNetwork): string {
  const q = (value: string) => `'${value.replaceAll("'", "'\\''")}'`;
  return `#!/bin/sh
${nodeDirs.map((dir) => `[ -f ${q(nodeCleanupScript(dir))} ] && sh ${q(nodeCleanupScript(dir))}`).join('\n')}
losetup --list --noheadings --output NAME,BACK-FILE 2>/dev/null | while read -r device file; do
  case "$file" in ${q(sharedVolumes)}/*) losetup -d "$device" 2>/dev/null ;; esac
done
${network.nodes.map((node) => `ip netns delete ${q(node.netns)} 2>/dev/null`).join('\n')}
ip netns delete ${q(network.switchNetns)} 2>/dev/null
exit 0
`;
}

/** Server-side applies objects (cluster add-ons) with the harness's field manager. */
export async function applyObjects(kubeConfig: KubeConfig, objects: KubernetesObject[]): Promise<void> {
  const client = KubernetesObjectApi.makeApiClient(kubeConfig);
  for (const object of objects) {
    await client.patch(object, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
  }
}

async function waitForDeployment(
  kubeConfig: KubeConfig,
  namespace: string,
  name: string,
  timeoutMs = 120_000,
) {
  const apps = kubeConfig.makeApiClient(AppsV1Api);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const deployment = await apps.readNamespacedDeployment({ namespace, name });
    if ((deployment.status?.readyReplicas ?? 0) >= (deployment.spec?.replicas ?? 1)) return;
    if (Date.now() > deadline)
      throw new Error(`deployment ${namespace}/${name} not ready after ${timeoutMs} ms`);
    await sleep(500);
  }
}
