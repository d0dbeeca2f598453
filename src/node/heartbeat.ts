// Registers the Node and keeps it Ready: the node Lease is renewed every quarter of its duration
// (as kubelet does) and the status is posted every minute, so kube-controller-manager's
// node-lifecycle controller neither taints the node nor evicts its pods.
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import {
  CoordinationV1Api,
  CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
} from '@kubernetes/client-node';
import { isNotFound } from '../kube/clients.js';
import type { Logger } from '../util/logger.js';
import {
  NODE_LEASE_NAMESPACE,
  desiredNode,
  kubernetesArchitecture,
  nodeLabels,
  nodeLease,
  nodeStatus,
  type HostFacts,
  type Readiness,
} from './node-object.js';

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const STATUS_INTERVAL_MS = 60_000;

export interface Heartbeat {
  /** The node's current labels (users may add some with kubectl; nodeSelectors see them). */
  labels(): Record<string, string>;
  /** Stops renewing and posts Ready=False, so the cluster knows at once that nothing runs here. */
  stop(): Promise<void>;
}

export interface HeartbeatOptions {
  kubeConfig: KubeConfig;
  nodeName: string;
  leaseDurationSeconds: number;
  logger: Logger;
}

async function firstLine(file: string): Promise<string> {
  return (await readFile(file, 'utf8').catch(() => '')).split('\n')[0]!.trim();
}

async function osImage(): Promise<string> {
  const release = await readFile('/etc/os-release', 'utf8').catch(() => '');
  return /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(release)?.[1] ?? os.type();
}

export async function readHostFacts(): Promise<HostFacts> {
  return {
    hostname: os.hostname(),
    address: '127.0.0.1',
    cpus: os.cpus().length,
    memoryBytes: os.totalmem(),
    kernelVersion: os.release(),
    osImage: await osImage(),
    architecture: kubernetesArchitecture(process.arch),
    machineID: await firstLine('/etc/machine-id'),
    bootID: await firstLine('/proc/sys/kernel/random/boot_id'),
  };
}

const READY: Readiness = {
  ready: true,
  reason: 'NodeAgentReady',
  message: 'vmop node is posting ready status',
};
const STOPPED: Readiness = { ready: false, reason: 'NodeAgentStopped', message: 'vmop node has stopped' };

export async function startHeartbeat(options: HeartbeatOptions): Promise<Heartbeat> {
  const { kubeConfig, nodeName, leaseDurationSeconds, logger } = options;
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const coordination = kubeConfig.makeApiClient(CoordinationV1Api);
  const host = await readHostFacts();

  let node = await core.createNode({ body: desiredNode(nodeName) }).catch(async (err: unknown) => {
    if ((err as { code?: number }).code !== 409) throw err;
    logger.info({ node: nodeName }, 'node exists; taking it over');
    return core.patchNode(
      { name: nodeName, body: { metadata: { labels: nodeLabels(nodeName) } } },
      mergePatch,
    );
  });
  const postStatus = async (readiness: Readiness) => {
    const status = nodeStatus(host, readiness, node.status?.conditions, new Date());
    node = await core.patchNodeStatus({ name: nodeName, body: { status } }, mergePatch);
  };
  await postStatus(READY);

  const renewLease = async () => {
    const lease = nodeLease(node, leaseDurationSeconds, new Date());
    try {
      await coordination.patchNamespacedLease(
        { name: nodeName, namespace: NODE_LEASE_NAMESPACE, body: { spec: lease.spec } },
        mergePatch,
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await coordination.createNamespacedLease({ namespace: NODE_LEASE_NAMESPACE, body: lease });
    }
  };
  await renewLease();
  logger.info({ node: nodeName, labels: node.metadata?.labels }, 'node registered and ready');

  const every = (ms: number, what: string, task: () => Promise<void>) =>
    setInterval(() => {
      task().catch((err: unknown) => logger.warn({ err: String(err) }, `${what} failed; trying again`));
    }, ms);
  const timers = [
    every((leaseDurationSeconds * 1000) / 4, 'renewing the node lease', renewLease),
    every(STATUS_INTERVAL_MS, 'posting the node status', () => postStatus(READY)),
  ];

  return {
    labels: () => ({ ...node.metadata?.labels }),
    async stop() {
      for (const timer of timers) clearInterval(timer);
      await postStatus(STOPPED).catch((err: unknown) =>
        logger.warn({ err: String(err) }, 'could not mark the node NotReady'),
      );
    },
  };
}
