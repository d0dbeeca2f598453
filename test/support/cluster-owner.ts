// The process that owns the `cluster` test bed (test/support/beds.ts): a bare local Kubernetes
// (no vmop) with every local image on its nodes, for the files that install vmop themselves (the
// Helm chart, an upgrade). It writes where things are to a state file and keeps it current, gives
// every namespace the test guest's image repository, and stops the cluster on SIGTERM or when the
// test file it serves is gone. Killing it with SIGKILL leaves nothing behind either: the cluster's
// orphan reaper takes everything down.
//   node --import tsx test/support/cluster-owner.ts <state file> <nodes> <pid of the test file's process>
import { rename, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { clusterNetworkTraces, startCluster } from '../../src/devenv/cluster.js';
import { provideImageRepositoryEverywhere } from '../../src/devenv/image-repository.js';
import { NODE_SERVICES } from '../../src/devenv/node/node.js';
import { createLogger } from '../../src/util/logger.js';
import { isAlive } from '../../src/util/process.js';

const Pid = z.object({ name: z.string(), pid: z.number().int(), restarts: z.number().int() });

export const ClusterBedState = z.object({
  ownerPid: z.number().int(),
  dir: z.string(),
  kubeconfigPath: z.string(),
  /** Where pods reach this machine (the cluster network's host address). */
  hostAddress: z.string(),
  imageRepositoryDir: z.string(),
  images: z.object({ manager: z.string(), runner: z.string(), redis: z.string() }),
  network: z.object({ namespaces: z.array(z.string()), hostInterface: z.string() }),
  controlPlane: z.array(Pid),
  nodes: z.array(
    z.object({
      name: z.string(),
      netns: z.string(),
      cgroupRoot: z.string(),
      /** The node's containerd, for `ctr` (images are put there as a registry pull would). */
      containerdSocket: z.string(),
      services: z.array(Pid),
    }),
  ),
});
export type ClusterBedState = z.infer<typeof ClusterBedState>;

async function main(stateFile: string, nodes: number, ownerPid: number): Promise<void> {
  const logger = createLogger('cluster-bed');
  let writeState = async () => {};
  const cluster = await startCluster({ nodes, logger, onRestart: () => void writeState() });
  const repositories = provideImageRepositoryEverywhere({
    kubeConfig: cluster.kubeConfig,
    hostDir: cluster.imageRepositoryDir,
    logger,
  });
  await repositories.start();
  const pids = (list: readonly { name: string; pid: number; restarts: number }[]) =>
    list.map(({ name, pid, restarts }) => ({ name, pid, restarts }));
  writeState = async () => {
    const state: ClusterBedState = {
      ownerPid: process.pid,
      dir: cluster.dir,
      kubeconfigPath: cluster.kubeconfigPath,
      hostAddress: cluster.network.hostAddress,
      imageRepositoryDir: cluster.imageRepositoryDir,
      images: {
        manager: cluster.images.manager.ref,
        runner: cluster.images.runner.ref,
        redis: cluster.images.redis.ref,
      },
      network: clusterNetworkTraces(cluster),
      controlPlane: pids(cluster.controlPlane.processes),
      nodes: cluster.nodes.map((node) => ({
        name: node.name,
        netns: node.network.netnsPath,
        cgroupRoot: node.cgroupRoot,
        containerdSocket: node.paths.containerdSocket,
        services: pids(NODE_SERVICES.flatMap((name) => node.service(name) ?? [])),
      })),
    };
    // Whole or not at all: a reader never sees half a file.
    await writeFile(`${stateFile}.partial`, JSON.stringify(state, null, 2));
    await rename(`${stateFile}.partial`, stateFile);
  };
  await writeState();
  const stop = async () => {
    await repositories.stop();
    await cluster.stop(30_000);
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  while (isAlive(ownerPid)) await sleep(2_000);
  logger.warn({ ownerPid }, 'the test file is gone; stopping the cluster bed');
  await stop();
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [stateFile, nodes, ownerPid] = process.argv.slice(2);
  main(stateFile!, Number(nodes), Number(ownerPid)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
