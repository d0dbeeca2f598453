// One real Kubernetes node on this machine: containerd, kubelet, kube-proxy, vmop's node agent
// and (where NetworkPolicies are enforced) kube-router's firewall in the node's own network namespace, running pods from locally built images. They are supervised
// as systemd would on a real node: one that dies is started again with back-off (running pods stay).
// The node agent runs as a node service, or not at all where the chart's DaemonSet is to run
// (`agent: false`, the cluster bed): containerd runs in the node's own mount and network
// namespaces (mount-namespace.ts), so the DaemonSet's hostPaths and host network are the node's.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { existsSync } from 'node:fs';
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { TUN_DEVICE } from '../../api/vm-network.js';
import { KVM_DEVICE } from '../../api/node-devices.js';
import { VMOP_BIN } from '../vmop-bin.js';
import { makeNodeMountNamespace } from './mount-namespace.js';
import type { Logger } from '../../util/logger.js';
import type { NodeCredentials } from '../control-plane.js';
import { locateNodeBinaries } from '../kube-binaries.js';
import { spawnLogged, type LoggedProcess } from '../logged-process.js';
import { removeUnmountedDir, startProcessGroup, type ProcessGroup } from '../process-group.js';
import { superviseProcess, type SupervisedProcess } from '../supervised-process.js';
import { cleanupScript } from './cleanup-script.js';
import { inNodeNetwork, type NodeNetwork } from './network.js';
import {
  cniConfig,
  containerdConfig,
  kubeletConfig,
  kubeProxyConfig,
  nodePaths,
  type NodePaths,
} from './node-config.js';

const run = promisify(execFile);

/** The services that stop before containerd, kubelet first: it must not see containerd go and restart containers meanwhile. */
const STOPPED_BEFORE_CONTAINERD = ['kubelet', 'node-agent', 'kube-proxy', 'kube-router'] as const;

/** The node's own processes, in the order they start. */
export const NODE_SERVICES = ['containerd', 'kubelet', 'kube-proxy', 'kube-router', 'node-agent'] as const;
export type NodeService = (typeof NODE_SERVICES)[number];

export interface LocalNode {
  name: string;
  address: string;
  network: NodeNetwork;
  paths: NodePaths;
  /** The node's cgroup root (pods' cgroups are below it). */
  cgroupRoot: string;
  /** Imports a docker-archive tar into the node's containerd (as `kubectl` users pull images). */
  importImage(archive: string): Promise<void>;
  /** A service's current process (its pid changes when its supervisor restarts it). */
  service(name: NodeService): SupervisedProcess | undefined;
  /**
   * The node's services stop for good (a dead kubelet: the node goes NotReady), pods keep running;
   * startServices() brings them back.
   */
  stopServices(): Promise<void>;
  startServices(): Promise<void>;
  /** As a power loss: the services stop and every process of the node's pods is killed. */
  powerOff(): Promise<void>;
  /**
   * Stops the node as a machine shuts down: kubelet first, then every container gets SIGTERM and
   * `graceMs` to end (runners power their guests down), then containerd; then the clean-up.
   */
  stop(graceMs?: number): Promise<void>;
}

export interface StartNodeOptions {
  kubeConfig: KubeConfig;
  credentials: NodeCredentials;
  network: NodeNetwork;
  /** Labels kubelet gives its Node (e.g. topology.kubernetes.io/zone). */
  labels?: Record<string, string>;
  /** Subnets of VMs' own addresses (the node agent's --vm-cidr). */
  vmCidrs?: string[];
  /** Whether vmop's node agent runs as a service of the node (default); false: the chart's DaemonSet gives devices. */
  agent?: boolean;
  /** Whether the node enforces NetworkPolicies (kube-router's firewall, as a service of the node). */
  networkPolicies?: boolean;
  /** Called when a service was started again by its supervisor. */
  onRestart?: () => void;
  /** docker-archive tars to import before kubelet starts. */
  images: string[];
  dir?: string;
  /** The process group its services run in; by default one of its own. Its reaper must run the node's clean-up script (nodeCleanupScript). */
  group?: ProcessGroup;
  logger: Logger;
}

/** The node's clean-up script, which an outside group's reaper must run (see StartNodeOptions.group). */
export const nodeCleanupScript = (dir: string) => path.join(dir, 'cleanup.sh');

const READY_TIMEOUT_MS = 120_000;
const DEFAULT_STOP_GRACE_MS = 30_000;

export async function startNode(options: StartNodeOptions): Promise<LocalNode> {
  const { network, credentials, logger } = options;
  const agent = options.agent ?? true;
  const runs = (name: NodeService) =>
    (agent || name !== 'node-agent') && (options.networkPolicies === true || name !== 'kube-router');
  const binaries = await locateNodeBinaries(logger);
  const ownsDir = options.dir === undefined;
  const dir = options.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'vmop-node-')));
  const paths = nodePaths(dir);
  const cgroupRoot = `/${network.netns}`;
  const cniNetwork = network.netns;
  for (const made of [paths.cniConfDir, paths.cniIpamDir, paths.kubeletRoot, paths.podLogsDir])
    await mkdir(made, { recursive: true });
  const file = (name: string) => path.join(dir, name);
  await writeFile(file('containerd.toml'), containerdConfig(paths));
  await writeFile(file('node-agent.kubeconfig'), options.kubeConfig.exportConfig(), { mode: 0o600 });
  await writeFile(
    path.join(paths.cniConfDir, '10-vmop.conflist'),
    cniConfig(cniNetwork, network.podCidr, paths),
  );
  await writeFile(
    file('kubelet.yaml'),
    kubeletConfig({
      paths,
      nodeAddress: network.nodeAddress,
      cgroupRoot,
      clientCaFile: credentials.kubeletClientCaFile,
    }),
  );
  await writeFile(
    file('kube-proxy.yaml'),
    kubeProxyConfig({ kubeconfig: credentials.kubeProxyKubeconfig, nodeName: credentials.name }),
  );
  const cleanup = nodeCleanupScript(dir);
  await writeFile(
    cleanup,
    cleanupScript({
      dir,
      netns: network.netns,
      cgroupRoot,
      containerdSocket: paths.containerdSocket,
      containerdRoot: paths.containerdRoot,
    }),
    { mode: 0o755 },
  );
  const ownGroup = options.group
    ? undefined
    : await startProcessGroup({
        name: 'node',
        removeDir: ownsDir ? dir : undefined,
        cleanupScript: cleanup,
        logger,
      });
  const group = options.group ?? ownGroup!;

  const services = new Map<NodeService, SupervisedProcess>();
  const mountNamespace = await makeNodeMountNamespace(dir);
  const inNode = [...inNodeNetwork(network).slice(0, -1), `--mount=${mountNamespace}`, '--'];
  const serviceArgs: Record<NodeService, string[]> = {
    containerd: [...inNode, 'containerd', '--config', file('containerd.toml')],
    kubelet: [
      ...inNode,
      binaries.kubelet,
      `--config=${file('kubelet.yaml')}`,
      `--kubeconfig=${credentials.kubeletKubeconfig}`,
      `--root-dir=${paths.kubeletRoot}`,
      `--cert-dir=${path.join(paths.kubeletRoot, 'pki')}`,
      `--hostname-override=${credentials.name}`,
      `--node-ip=${network.nodeAddress}`,
      ...(options.labels
        ? [
            `--node-labels=${Object.entries(options.labels)
              .map(([key, value]) => `${key}=${value}`)
              .join(',')}`,
          ]
        : []),
    ],
    'kube-proxy': [...inNode, binaries.kubeProxy, `--config=${file('kube-proxy.yaml')}`],
    // Its firewall alone: pod networking is the CNI bridge's, Services kube-proxy's. It reads
    // pods, namespaces and NetworkPolicies (the node agent's kubeconfig is the cluster admin's).
    'kube-router': [
      ...inNode,
      binaries.kubeRouter,
      `--kubeconfig=${file('node-agent.kubeconfig')}`,
      `--hostname-override=${credentials.name}`,
      '--run-firewall=true',
      '--run-router=false',
      '--run-service-proxy=false',
      '--enable-cni=false',
      '--health-port=0',
    ],
    // It routes the VMs' own addresses on this node: it watches pods and VMs of the whole cluster.
    'node-agent': [
      ...inNode,
      VMOP_BIN,
      'node-agent',
      `--node-name=${credentials.name}`,
      `--kubeconfig=${file('node-agent.kubeconfig')}`,
      ...(options.vmCidrs ?? []).map((cidr) => `--vm-cidr=${cidr}`),
    ],
  };
  /** Starts a service under supervision; resolves with its first process. */
  const launch = async (name: NodeService): Promise<LoggedProcess> => {
    const args = serviceArgs[name];
    const spawn = () => spawnLogged(name, args[0]!, args.slice(1), file(`${name}.log`), { group });
    const first = await spawn();
    services.set(
      name,
      await superviseProcess(name, spawn, {
        logger,
        first,
        onStart: (ref) => {
          if (ref !== first.ref) options.onRestart?.();
        },
      }),
    );
    return first;
  };
  const stopServices = async () => {
    for (const name of [...STOPPED_BEFORE_CONTAINERD, 'containerd'] as const) {
      await services.get(name)?.stop(10_000);
      services.delete(name);
    }
  };
  const ctr = (...args: string[]) =>
    run('ctr', ['--address', paths.containerdSocket, '--namespace', 'k8s.io', ...args], {
      maxBuffer: 16 * 1024 * 1024,
    });
  const importImage = async (archive: string) => {
    await ctr('images', 'import', '--no-unpack', archive);
  };

  const stop = async (graceMs = DEFAULT_STOP_GRACE_MS) => {
    for (const name of STOPPED_BEFORE_CONTAINERD) {
      await services.get(name)?.stop(10_000);
      services.delete(name);
    }
    const containerd = services.get('containerd');
    if (containerd?.alive()) await stopContainers(ctr, graceMs, logger);
    await containerd?.stop(10_000);
    services.delete('containerd');
    await run('sh', [cleanup]);
    await ownGroup?.release();
    if (ownsDir) await removeUnmountedDir(dir);
    logger.info({ dir }, 'node stopped');
  };

  try {
    const startedAt = Date.now();
    await makeCgroupRoot(cgroupRoot);
    const containerd = await launch('containerd');
    await waitFor(containerd, () =>
      ctr('version').then(
        () => true,
        () => false,
      ),
    );
    for (const archive of options.images) await importImage(archive);

    const kubelet = await launch('kubelet');
    await launch('kube-proxy');
    if (runs('node-agent')) await launch('node-agent');
    const core = options.kubeConfig.makeApiClient(CoreV1Api);
    // Ready, with /dev/net/tun and (where this machine has it) /dev/kvm to give: runner pods ask for them.
    const kvm = existsSync('/dev/kvm');
    await waitFor(kubelet, async () => {
      const node = await core.readNode({ name: credentials.name }).catch(() => undefined);
      const ready = node?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
      const offered = (resource: string) => {
        const slots = node?.status?.allocatable?.[resource]; // a quantity: "1k"
        return slots !== undefined && slots !== '0';
      };
      return ready && (!agent || ((!kvm || offered(KVM_DEVICE)) && offered(TUN_DEVICE)));
    });
    // Once its Node exists: kube-router finds its node by name at start, or exits.
    if (runs('kube-router')) await launch('kube-router');
    logger.info({ node: credentials.name, dir, ms: Date.now() - startedAt }, 'node ready');
    let stopping: Promise<void> | undefined;
    return {
      name: credentials.name,
      address: network.nodeAddress,
      network,
      paths,
      cgroupRoot,
      importImage,
      service: (name) => services.get(name),
      stopServices,
      async startServices() {
        for (const name of NODE_SERVICES) if (!services.has(name) && runs(name)) await launch(name);
      },
      async powerOff() {
        await stopServices();
        await killCgroup(cgroupRoot);
      },
      stop: (graceMs) => (stopping ??= stop(graceMs)),
    };
  } catch (err) {
    await stop(0).catch((stopErr: unknown) => logger.warn({ err: stopErr }, 'cleaning up the node failed'));
    throw err;
  }

  async function waitFor(child: LoggedProcess, check: () => Promise<boolean>): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (child.hasExited()) {
        throw new Error(
          `${child.name} exited (${await child.exited}); ${child.logPath}:\n${await child.logTail()}`,
        );
      }
      if (await check()) return;
      if (Date.now() > deadline) {
        throw new Error(
          `${child.name} not ready after ${READY_TIMEOUT_MS} ms; ${child.logPath}:\n${await child.logTail()}`,
        );
      }
      await sleep(250);
    }
  }
}

/** Kills every process in the cgroup tree (the pods' processes, from the pids hierarchy). */
async function killCgroup(cgroupRoot: string): Promise<void> {
  await run('sh', [
    '-c',
    'for procs in $(find "/sys/fs/cgroup/pids$1" -name cgroup.procs); do for pid in $(cat "$procs"); do kill -KILL "$pid" 2>/dev/null; done; done; true',
    'kill-cgroup',
    cgroupRoot,
  ]);
}

/** kubelet (cgroupfs driver) expects its cgroup root to exist in every hierarchy. */
async function makeCgroupRoot(cgroupRoot: string): Promise<void> {
  for (const hierarchy of await readdir('/sys/fs/cgroup')) {
    await mkdir(path.join('/sys/fs/cgroup', hierarchy, cgroupRoot), { recursive: true }).catch(
      () => undefined,
    );
  }
}

type Ctr = (...args: string[]) => Promise<{ stdout: string }>;

/** SIGTERM to every running container, SIGKILL to those still running after `graceMs`. */
async function stopContainers(ctr: Ctr, graceMs: number, logger: Logger): Promise<void> {
  // `ctr tasks list`: TASK PID STATUS, one line a container (pause containers too).
  const running = async () => {
    const { stdout } = await ctr('tasks', 'list').catch(() => ({ stdout: '' }));
    return stdout
      .split('\n')
      .slice(1)
      .map((line) => line.trim().split(/\s+/))
      .filter((fields) => fields[2] === 'RUNNING')
      .map((fields) => fields[0]!);
  };
  const signal = (ids: string[], name: string) =>
    Promise.all(ids.map((id) => ctr('tasks', 'kill', '--signal', name, id).catch(() => undefined)));
  let ids = await running();
  if (ids.length === 0) return;
  logger.info({ containers: ids.length, graceMs }, 'stopping containers');
  await signal(ids, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (ids.length > 0 && Date.now() < deadline) {
    await sleep(500);
    ids = await running();
  }
  if (ids.length > 0) {
    logger.warn({ containers: ids.length }, 'containers still running after the grace period; killing them');
    await signal(ids, 'SIGKILL');
  }
}
