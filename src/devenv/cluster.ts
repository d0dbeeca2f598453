// A whole single-node Kubernetes on this machine: the control plane, one real node (containerd,
// kubelet, kube-proxy) in its own network namespace, cluster DNS and a default StorageClass of
// local volumes. Free ports and addresses, a temp dir, and nothing left behind on stop. vmop itself
// is not installed: `vmop dev` runs it from the checkout, the chart's tests install the chart.
import { cp, mkdir, mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
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
import { startLocalVolumeProvisioner, storageClassObject } from './local-volumes.js';
import { createNodeNetwork, deleteNodeNetwork, type NodeNetwork } from './node/network.js';
import { nodeCleanupScript, startNode, type LocalNode } from './node/node.js';
import { removeUnmountedDir, startOrphanReaper } from './orphan-reaper.js';
import { ensureTestGuest } from './test-guest.js';

export interface Cluster {
  controlPlane: ControlPlane;
  kubeConfig: KubeConfig;
  kubeconfigPath: string;
  node: LocalNode;
  network: NodeNetwork;
  images: LocalImages;
  /** A directory with the test guest under `test-guest/`, for image repository PVs. */
  imageRepositoryDir: string;
  /** Gives `namespace` the PVC `vmop-image-repository` on imageRepositoryDir. */
  provideImageRepository(namespace: string): Promise<void>;
  dir: string;
  /** Stops the node (containers get `graceMs` to end), then the control plane; removes everything. */
  stop(graceMs?: number): Promise<void>;
}

export interface StartClusterOptions {
  dir?: string;
  logger?: Logger;
}

const FIELD_MANAGER = 'vmop-devenv';

export async function startCluster(options: StartClusterOptions = {}): Promise<Cluster> {
  const logger = options.logger ?? createLogger('cluster');
  const startedAt = Date.now();
  const ownsDir = options.dir === undefined;
  const dir = options.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'vmop-cluster-')));
  await mkdir(dir, { recursive: true });
  const [images, guest] = await Promise.all([ensureLocalImages(logger), ensureTestGuest()]);
  const nodeDir = path.join(dir, 'node');
  // One reaper for every process of the cluster: should this process die, it kills them, runs the
  // node's clean-up (mounts, loop devices, network namespace, cgroups) and removes the directory.
  const reaper = startOrphanReaper({
    removeDir: ownsDir ? dir : undefined,
    cleanupScript: nodeCleanupScript(nodeDir),
    logger,
  });
  const network = await createNodeNetwork();
  const stack: Array<() => Promise<void>> = [() => deleteNodeNetwork(network)];
  const unwind = async () => {
    for (const stop of stack.reverse())
      await stop().catch((err: unknown) => logger.warn({ err }, 'stop failed'));
    await reaper.release();
    if (ownsDir) await removeUnmountedDir(dir);
  };
  try {
    const controlPlane = await startControlPlane({
      address: network.hostAddress,
      dir: path.join(dir, 'control-plane'),
      reaper,
      logger,
    });
    stack.push(() => controlPlane.stop());
    const kubeConfig = controlPlane.kubeConfig;
    const node = await startNode({
      kubeConfig,
      credentials: controlPlane.node,
      network,
      images: [images.pause, images.coredns, images.redis, images.manager, images.runner].map(
        (i) => i.archive,
      ),
      dir: nodeDir,
      reaper,
      logger,
    });
    let graceMs: number | undefined;
    stack.push(() => node.stop(graceMs));

    const provisioner = startLocalVolumeProvisioner({
      kubeConfig,
      nodeName: node.name,
      // Below the node's directory: its clean-up detaches the loop devices of what is there.
      dir: path.join(nodeDir, 'volumes'),
      logger,
    });
    await provisioner.start();
    stack.push(() => provisioner.stop());
    await applyObjects(kubeConfig, [storageClassObject(), ...clusterDnsObjects(images.coredns.ref)]);

    const imageRepositoryDir = path.join(dir, 'image-repository');
    await mkdir(imageRepositoryDir, { recursive: true });
    // A copy, not a link: the runner container sees the PV's directory, not this machine's paths.
    await cp(guest.dir, path.join(imageRepositoryDir, 'test-guest'), { recursive: true });

    await waitForDeployment(kubeConfig, 'kube-system', 'coredns');
    logger.info({ dir, server: controlPlane.server, ms: Date.now() - startedAt }, 'cluster ready');
    let stopping: Promise<void> | undefined;
    return {
      controlPlane,
      kubeConfig,
      kubeconfigPath: controlPlane.kubeconfigPath,
      node,
      network,
      images,
      imageRepositoryDir,
      provideImageRepository: (namespace) =>
        provideImageRepository({ kubeConfig, namespace, hostDir: imageRepositoryDir }),
      dir,
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
