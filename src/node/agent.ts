// `vmop node`: a local stand-in for kubelet (and, for runner pods, the scheduler and a local volume
// provisioner), so that VMs run on a machine without a cluster's nodes.
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { createLogger } from '../util/logger.js';
import { startHeartbeat } from './heartbeat.js';
import { watchObjects, type ObjectWatch } from '../kube/watch.js';
import { loadKubeConfig } from '../kube/config.js';
import { NodeAgentOptions } from './options.js';
import { PodWorker, VMOP_BIN } from './pod-worker.js';
import { RUNNER_POD_SELECTOR, placement } from './scheduling.js';
import { createClaimResolver } from './volumes/claims.js';
import { SourceWatches } from './volumes/source-watches.js';

export interface NodeAgent {
  nodeName: string;
  /** Stops the runners (bounded by shutdownGraceSeconds), marks the node NotReady, stops watching. */
  stop(): Promise<void>;
}

const HOST_IP = '127.0.0.1';
const BIND_RETRY_MS = 5_000;

export async function startNodeAgent(input: NodeAgentOptions): Promise<NodeAgent> {
  const options = NodeAgentOptions.parse(input);
  const { nodeName, stateDir } = options;
  const logger = createLogger('node', { node: nodeName });
  const kubeConfig = loadKubeConfig(options.kubeconfig);
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const podsDir = path.join(stateDir, 'pods');
  const volumesDir = path.join(stateDir, 'volumes');
  await mkdir(podsDir, { recursive: true });
  await mkdir(volumesDir, { recursive: true });

  const heartbeat = await startHeartbeat({
    kubeConfig,
    nodeName,
    leaseDurationSeconds: options.leaseDurationSeconds,
    logger,
  });
  const sources = new SourceWatches(kubeConfig, logger);
  const workerDeps = {
    nodeName,
    hostIP: HOST_IP,
    podsDir,
    core,
    sources,
    resolveClaim: createClaimResolver({ core, nodeName, volumesDir, logger }),
    runnerEnv: options.runnerEnv,
    restartBackoff: options.restartBackoff,
    logger,
  };
  const workers = new Map<string, PodWorker>();
  let stopping = false;
  let toldAboutImages = false;

  const bind = (pod: V1Pod, watch: ObjectWatch<V1Pod>) => {
    const { name, namespace } = pod.metadata!;
    core
      .createNamespacedPodBinding({
        name: name!,
        namespace: namespace!,
        body: { metadata: { name }, target: { apiVersion: 'v1', kind: 'Node', name: nodeName } },
      })
      .then(
        () => logger.info({ pod: `${namespace}/${name}` }, 'pod bound to this node'),
        (err: unknown) => {
          if ((err as { code?: number }).code === 409) return; // bound elsewhere meanwhile
          logger.warn({ pod: `${namespace}/${name}`, err: String(err) }, 'binding failed; trying again');
          setTimeout(() => {
            const latest = watch.get(name!, namespace);
            if (latest && !stopping) onPod(latest, watch);
          }, BIND_RETRY_MS).unref();
        },
      );
  };

  const onPod = (pod: V1Pod, watch: ObjectWatch<V1Pod>) => {
    if (stopping) return;
    switch (placement(pod, nodeName, heartbeat.labels())) {
      case 'bind':
        return bind(pod, watch);
      case 'ours': {
        const uid = pod.metadata!.uid!;
        let worker = workers.get(uid);
        if (!worker) {
          if (!toldAboutImages) {
            logger.info(
              { image: pod.spec?.containers[0]?.image, vmop: VMOP_BIN },
              'container images are not used: containers run this vmop',
            );
            toldAboutImages = true;
          }
          worker = new PodWorker(pod, workerDeps);
          workers.set(uid, worker);
          void worker.finished.then(() => workers.delete(uid));
        }
        worker.update(pod);
        return;
      }
      case 'not-ours':
        return;
    }
  };

  const podWatches = (options.namespaces.length > 0 ? options.namespaces : [undefined]).map((namespace) => {
    const watch: ObjectWatch<V1Pod> = watchObjects<V1Pod>(
      kubeConfig,
      {
        path: namespace ? `/api/v1/namespaces/${namespace}/pods` : '/api/v1/pods',
        list: () =>
          namespace
            ? core.listNamespacedPod({ namespace, labelSelector: RUNNER_POD_SELECTOR })
            : core.listPodForAllNamespaces({ labelSelector: RUNNER_POD_SELECTOR }),
        labelSelector: RUNNER_POD_SELECTOR,
      },
      {
        upsert: (pod) => onPod(pod, watch),
        deleted: (pod) => workers.get(pod.metadata!.uid!)?.gone(),
      },
      logger,
    );
    return watch;
  });
  await Promise.all(podWatches.map((watch) => watch.start()));
  logger.info({ stateDir, namespaces: options.namespaces }, 'node agent started');

  return {
    nodeName,
    async stop() {
      stopping = true;
      await Promise.all(podWatches.map((watch) => watch.stop()));
      const graceMs = options.shutdownGraceSeconds * 1000;
      await Promise.all([...workers.values()].map((worker) => worker.shutdown(graceMs)));
      await sources.stop();
      await heartbeat.stop();
      logger.info('node agent stopped');
    },
  };
}
