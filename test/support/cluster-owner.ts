// The process that owns the `cluster` test bed (test/support/beds.ts): a bare local Kubernetes
// (no vmop, not even its node agent: the chart's DaemonSet is what runs there) with every local
// image on its nodes, for the files that install vmop themselves (the
// Helm chart, an upgrade). It writes where things are to a state file and keeps it current, gives
// every namespace the test guest's image repository, and stops the cluster on SIGTERM or when the
// test file it serves is gone (its stdin, a pipe only that process holds, ends). Killing it with
// SIGKILL leaves nothing behind either: the cluster's process group reaper takes everything down.
//   node --import tsx test/support/cluster-owner.ts <state file> <nodes>
import { rename, writeFile } from 'node:fs/promises';
import { z } from 'zod';
import { clusterNetworkTraces, startCluster } from '../../src/devenv/cluster.js';
import { provideImageRepositoryEverywhere } from '../../src/devenv/image-repository.js';
import { NODE_SERVICES } from '../../src/devenv/node/node.js';
import { createLogger } from '../../src/util/logger.js';
import { processRef, ProcessRef } from '../../src/util/process.js';

const Supervised = ProcessRef.extend({ name: z.string(), restarts: z.number().int() });

export const ClusterBedState = z.object({
  /** This process: the bed's test stops the bed by SIGKILLing it (the reaper's path). */
  owner: ProcessRef,
  dir: z.string(),
  /** The cgroup every process of the cluster runs in. */
  processGroup: z.string(),
  kubeconfigPath: z.string(),
  /** Where pods reach this machine (the cluster network's host address). */
  hostAddress: z.string(),
  imageRepositoryDir: z.string(),
  images: z.object({ manager: z.string(), runner: z.string(), redis: z.string() }),
  network: z.object({ namespaces: z.array(z.string()), hostInterface: z.string() }),
  controlPlane: z.array(Supervised),
  nodes: z.array(
    z.object({
      name: z.string(),
      netns: z.string(),
      cgroupRoot: z.string(),
      /** The node's containerd, for `ctr` (images are put there as a registry pull would). */
      containerdSocket: z.string(),
      services: z.array(Supervised),
    }),
  ),
});
export type ClusterBedState = z.infer<typeof ClusterBedState>;

async function main(stateFile: string, nodes: number): Promise<void> {
  const logger = createLogger('cluster-bed');
  let writeState = async () => {};
  const cluster = await startCluster({
    nodes,
    nodeAgents: false,
    logger,
    onRestart: () => void writeState(),
  });
  const repositories = provideImageRepositoryEverywhere({
    kubeConfig: cluster.kubeConfig,
    hostDir: cluster.imageRepositoryDir,
    logger,
  });
  await repositories.start();
  const pids = (list: readonly { name: string; ref: ProcessRef; restarts: number }[]) =>
    list.map(({ name, ref, restarts }) => ({ name, ...ref, restarts }));
  const owner = processRef(process.pid)!;
  writeState = async () => {
    const state: ClusterBedState = {
      owner,
      dir: cluster.dir,
      processGroup: cluster.processGroup,
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
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      await repositories.stop();
      await cluster.stop(30_000);
      process.exit(0);
    })());
  process.once('SIGTERM', () => void stop());
  // The test file's process holds the other end of stdin: it ends when that process is gone.
  process.stdin.resume();
  process.stdin.once('end', () => {
    logger.warn('the test file is gone; stopping the cluster bed');
    void stop();
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [stateFile, nodes] = process.argv.slice(2);
  main(stateFile!, Number(nodes)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
