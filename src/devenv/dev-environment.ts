// `vmop dev`: a whole local vmop in the background: a real single-node Kubernetes (control plane,
// kubelet, containerd), Redis, and two manager replicas from this checkout whose runner pods run
// the runner image built from it. One detached supervisor; its state file says where things are.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger, type Logger } from '../util/logger.js';
import { serveDevControl, type DevCommand } from './dev-control.js';
import { isRunning, processRef, ProcessRef } from '../util/process.js';
import { clusterNetworkTraces, startCluster, type Cluster } from './cluster.js';
import { NODE_SERVICES } from './node/node.js';
import { SHARED_STORAGE_CLASS } from './local-volumes.js';
import { provideImageRepositoryEverywhere } from './image-repository.js';
import { installCrds, installUserRoles } from './install-crds.js';
import { spawnLogged } from './logged-process.js';
import { startProcessGroup, type ProcessGroup } from './process-group.js';
import { REDIS_SETTINGS, startRedis } from './redis.js';
import { redisAclFile, REDIS_USERS, type RedisPasswords } from './redis-acl.js';
import { redisUrlWithUser } from '../api/tenant-redis.js';
import { startSentinelSet, type SentinelSet } from './redis-sentinel.js';
import { startImageServer, type ImageServer } from './image-server.js';
import { startImageRegistry, type ImageRegistry } from './image-registry.js';
import { superviseProcess, type SupervisedProcess } from './supervised-process.js';
import { DEV_PASSWORD, DEV_PEOPLE, startOidcProvider, type OidcProvider } from './oidc-provider.js';
import { applyObjects } from './cluster.js';
import { RESTRICTED_NAMESPACE_LABELS } from '../reconcilers/virtual-machine/pod-security.js';
import { freePort, waitForPort } from '../util/free-port.js';
import { GROUP } from '../api/virtual-machine.js';
import { VMOP_BIN } from './vmop-bin.js';

export const MANAGER_REPLICAS = 2;
/** How long runners get to power their guests down when the environment stops. */
const NODE_STOP_GRACE_MS = 120_000;

export { VMOP_BIN };

export function devDir(): string {
  return process.env.VMOP_DEV_DIR ?? join(homedir(), '.vmop', 'dev');
}

export const RedisLayout = z.enum(['single', 'sentinel']);
export type RedisLayout = z.infer<typeof RedisLayout>;

/** A supervised process now: restarted, it is another one. */
const SupervisedRef = ProcessRef.extend({ name: z.string(), restarts: z.number().int() });

export const DevState = z.object({
  /** The supervisor process (`vmop dev down` stops it, and only it). */
  supervisor: ProcessRef,
  /** The cgroups of its process groups (everything it started is in one of them). */
  processGroups: z.array(z.string()),
  kubeconfig: z.string(),
  redisUrl: z.string(),
  managers: z.array(
    ProcessRef.extend({
      log: z.string(),
      restarts: z.number().int(),
      /** Its /metrics, on the node network's host address: a Prometheus on a node reaches it. */
      metricsUrl: z.string(),
    }),
  ),
  /** single: one Redis, restarted (empty) when it dies; sentinel: the chart's Sentinel layout. */
  redis: z.discriminatedUnion('layout', [
    ProcessRef.extend({ layout: z.literal('single'), restarts: z.number().int() }),
    z.object({
      layout: z.literal('sentinel'),
      servers: z.array(ProcessRef.extend({ port: z.number().int() })),
      sentinels: z.array(ProcessRef.extend({ port: z.number().int() })),
    }),
  ]),
  cluster: z.object({
    /** Logs and state of the control plane and the nodes (kubelet, containerd) live here. */
    dir: z.string(),
    /** The first node (the only one, unless started with more). */
    node: z.string(),
    nodes: z.array(z.string()),
    runnerImage: z.string(),
    /** What it made on this machine's network: its network namespaces and its interface to them. */
    network: z.object({ namespaces: z.array(z.string()), hostInterface: z.string() }),
  }),
  /** The control plane's supervised processes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler). */
  controlPlane: z.array(SupervisedRef),
  /** Each node's supervised services (containerd, kubelet, kube-proxy), network namespace and cgroup root. */
  nodeServices: z.array(
    z.object({
      node: z.string(),
      /** Its network namespace (e.g. for `nsenter --net=`). */
      netns: z.string(),
      /** Its pods' cgroups are below this one. */
      cgroupRoot: z.string(),
      services: z.array(SupervisedRef),
    }),
  ),
  /** The local web server for disk images (disks[].source.http in the local cluster). */
  imageServer: z.object({
    url: z.string(),
    dir: z.string(),
    /** The test guest's bootable disk (qcow2), served as test-guest.qcow2. */
    testGuestDisk: z.string(),
    /** A line `GET /<file>` for each download. */
    accessLog: z.string(),
  }),
  /** The local OCI registry (plain HTTP) for disks[].source.registry, with the test guest's disk. */
  imageRegistry: z.object({
    address: z.string(),
    testGuestImage: z.string(),
    /** An image with no disk in it (what an import refuses). */
    noDiskImage: z.string(),
  }),
  /** The web GUI (one URL per manager replica) and where people log in to it. */
  web: z.object({
    urls: z.array(z.string()),
    issuer: z.string(),
    people: z.array(z.object({ user: z.string(), groups: z.array(z.string()) })),
    password: z.string(),
  }),
  startedAt: z.string(),
});
export type DevState = z.infer<typeof DevState>;

const stateFile = (dir: string) => join(dir, 'state.json');
/** Where the running supervisor takes commands (dev-control.ts). */
export const controlSocket = (dir = devDir()) => join(dir, 'control.sock');

/** The running environment's state, or undefined when none runs. */
export function readDevState(dir = devDir()): DevState | undefined {
  if (!existsSync(stateFile(dir))) return undefined;
  const parsed = DevState.safeParse(JSON.parse(readFileSync(stateFile(dir), 'utf8')));
  // A state file of an older vmop names its supervisor by pid alone: nothing to trust it with.
  if (!parsed.success) return undefined;
  return isRunning(parsed.data.supervisor) ? parsed.data : undefined;
}

export interface DevEnvironment {
  /** Where things are now (pids change when a process is restarted). */
  readonly state: Omit<DevState, 'supervisor' | 'startedAt'>;
  cluster: Cluster;
  /** The single Redis (layout single). */
  redis?: SupervisedProcess;
  /** The Sentinel set (layout sentinel): its servers are not restarted; it survives losing one. */
  sentinelSet?: SentinelSet;
  managers: SupervisedProcess[];
  imageServer: ImageServer;
  imageRegistry: ImageRegistry;
  oidcProvider: OidcProvider;
  /** Does what a control command asks: a node stopped, powered off or started again; Redis lost. */
  control(command: DevCommand): Promise<void>;
  /** Stops it as a machine shuts down: the nodes first (runners power their guests down), then the rest. */
  stop(): Promise<void>;
}

export interface StartDevEnvironmentOptions {
  /** Where the managers' logs and the kubeconfig go. */
  dir: string;
  /** More arguments for every manager replica. */
  managerArgs?: string[];
  /** How many nodes (default 1). */
  nodes?: number;
  /** Subnets VMs get addresses of their own from (the managers' and node agents' --vm-cidr). */
  vmCidrs?: string[];
  /** One Redis (default), or 3 with 3 Sentinels as the chart's Sentinel mode runs them. */
  redis?: RedisLayout;
  /**
   * Whether VMs run with KVM, runner pods getting /dev/kvm from the nodes' agents (default: where
   * this machine has /dev/kvm). Off, QEMU emulates: where nested KVM cannot boot a Linux guest.
   */
  kvm?: boolean;
  /** Called after a process was restarted (its pid in `state` changed). */
  onRestart?: () => void;
  logger?: Logger;
}

/** Starts the cluster, Redis and the manager replicas; every process dies with this one. */
export async function startDevEnvironment(options: StartDevEnvironmentOptions): Promise<DevEnvironment> {
  const { dir } = options;
  const logger = options.logger ?? createLogger('dev');
  mkdirSync(dir, { recursive: true });
  // Everything it starts beside the cluster (which has a group of its own).
  const group = await startProcessGroup({ name: 'dev', logger });
  const cluster = await startCluster({
    nodes: options.nodes,
    // The managers run from this checkout and Redis on this machine: the nodes need only the runner.
    images: ['runner'],
    vmCidrs: options.vmCidrs,
    // As a cluster whose network enforces them: vmop's runner policies hold, and tenants' do.
    networkPolicies: true,
    onRestart: () => options.onRestart?.(),
    logger,
  });
  const supervision = { logger, onStart: () => options.onRestart?.() };
  // On the node network's host address: the managers here and the runner pods there both reach it.
  const { redis, sentinelSet, redisUrl, runnerRedisUrl } = await startDevRedis(
    options.redis ?? 'single',
    cluster.network.hostAddress,
    dir,
    { logger, group, onStart: () => options.onRestart?.() },
  );
  const imageServer = await startImageServer({
    dir: join(dir, 'images'),
    accessLog: join(dir, 'images-access.log'),
    host: cluster.network.hostAddress,
    testGuestDir: join(cluster.imageRepositoryDir, 'test-guest'),
  });
  const imageRegistry = await startImageRegistry({
    dir,
    host: cluster.network.hostAddress,
    testGuestDisk: imageServer.testGuestDisk,
    group,
  });
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, cluster.controlPlane.kubeconfigYaml, { mode: 0o600 });
  await installCrds(cluster.kubeConfig);
  await installUserRoles(cluster.kubeConfig);
  // VMs are made here as a tenant makes them: every pod vmop makes must pass Pod Security "restricted".
  await applyObjects(cluster.kubeConfig, [
    {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: 'default', labels: RESTRICTED_NAMESPACE_LABELS },
    },
  ]);
  // Every namespace gets the test guest's image repository, also one made later.
  const imageRepositories = provideImageRepositoryEverywhere({
    kubeConfig: cluster.kubeConfig,
    hostDir: cluster.imageRepositoryDir,
    logger,
  });
  await imageRepositories.start();
  await cluster.provideImageRepository('default'); // before `npm start` applies its example

  // The web GUI: every replica serves it (on loopback), people log in at Dex.
  const webPorts = await Promise.all(Array.from({ length: MANAGER_REPLICAS }, () => freePort()));
  const webUrls = webPorts.map((port) => `http://127.0.0.1:${port}`);
  const metricsPorts = await Promise.all(Array.from({ length: MANAGER_REPLICAS }, () => freePort()));
  const metricsUrls = metricsPorts.map((port) => `http://${cluster.network.hostAddress}:${port}/metrics`);
  const oidcProvider = await startOidcProvider({
    dir,
    redirectUris: webUrls.map((url) => `${url}/auth/callback`),
    group,
  });
  await applyObjects(cluster.kubeConfig, devAdminRbac());

  const managers: SupervisedProcess[] = [];
  const managerLogs: string[] = [];
  for (let replica = 1; replica <= MANAGER_REPLICAS; replica++) {
    const name = `manager-${replica}`;
    const log = join(dir, `${name}.log`);
    const web = [
      ...['--web-port', String(webPorts[replica - 1]), '--web-host', '127.0.0.1'],
      ...['--web-public-url', webUrls[replica - 1]!, '--oidc-issuer', oidcProvider.issuer],
      ...['--oidc-client-id', oidcProvider.clientId],
      // People are named as its Dex's static users are: by names this bed gives them, which nobody
      // picks at login (where people can choose theirs, keep the default `sub`).
      ...['--oidc-username-claim', 'preferred_username'],
      // A short-lived bed: its usage chart fills in seconds rather than minutes.
      ...['--web-usage-sample-seconds', '5'],
      // A proxy on this machine (127.0.0.1 only, not the rest of 127/8) may name its clients.
      ...['--web-trusted-proxy', '127.0.0.1'],
    ];
    const args = [
      ...['manager', '--kubeconfig', kubeconfig, '--redis', redisUrl],
      ...['--metrics-port', String(metricsPorts[replica - 1])],
      ...['--runner-redis-url', runnerRedisUrl],
      ...web,
      ...['--runner-image', cluster.images.runner.ref, '--runner-image-pull-policy', 'Never'],
      // Runner pods get /dev/kvm from the nodes' agents where this machine has it and KVM is wanted
      // (the test guest's template emulates all the same).
      ...((options.kvm ?? existsSync('/dev/kvm')) ? [] : ['--no-kvm']),
      // Any node can take a VM over: its runner data is on the shared (network) class.
      ...['--runner-data-storage-class', SHARED_STORAGE_CLASS, '--runner-data-access-mode', 'ReadWriteMany'],
      ...(options.vmCidrs ?? []).flatMap((cidr) => ['--vm-cidr', cidr]),
      // The managers here never connect to runner pods (this machine has no route to pods); a
      // Prometheus on a node scrapes them from that node's address.
      '--runner-network-policy',
      ...cluster.nodes.flatMap((node) => [
        '--runner-metrics-from',
        JSON.stringify({ ipBlock: { cidr: `${node.address}/32` } }),
      ]),
      ...(options.managerArgs ?? []),
    ];
    const env = { VMOP_OIDC_CLIENT_SECRET: oidcProvider.clientSecret };
    managers.push(
      await superviseProcess(name, () => spawnLogged(name, VMOP_BIN, args, log, { env, group }), supervision),
    );
    managerLogs.push(log);
  }
  // Up means the GUI answers: every replica serves it once its caches are filled.
  await Promise.all(webPorts.map((port) => waitForPort(port, '127.0.0.1', 120_000)));
  return {
    get state() {
      return {
        kubeconfig,
        redisUrl,
        processGroups: [group.cgroup, cluster.processGroup],
        managers: managers.map((m, i) => ({
          ...m.ref,
          log: managerLogs[i]!,
          restarts: m.restarts,
          metricsUrl: metricsUrls[i]!,
        })),
        redis: sentinelSet
          ? {
              layout: 'sentinel' as const,
              servers: sentinelSet.servers.map(({ ref, port }) => ({ ...ref, port })),
              sentinels: sentinelSet.sentinels.map(({ ref, port }) => ({ ...ref, port })),
            }
          : { layout: 'single' as const, ...redis!.ref, restarts: redis!.restarts },
        controlPlane: cluster.controlPlane.processes.map(({ name, ref, restarts }) => ({
          name,
          ...ref,
          restarts,
        })),
        nodeServices: cluster.nodes.map((node) => ({
          node: node.name,
          netns: node.network.netnsPath,
          cgroupRoot: node.cgroupRoot,
          services: NODE_SERVICES.flatMap((name) => {
            const service = node.service(name);
            return service ? [{ name, ...service.ref, restarts: service.restarts }] : [];
          }),
        })),
        cluster: {
          dir: cluster.dir,
          node: cluster.node.name,
          nodes: cluster.nodes.map((node) => node.name),
          runnerImage: cluster.images.runner.ref,
          network: clusterNetworkTraces(cluster),
        },
        imageServer: {
          url: imageServer.url,
          dir: imageServer.dir,
          testGuestDisk: imageServer.testGuestDisk,
          accessLog: imageServer.accessLog,
        },
        imageRegistry: {
          address: imageRegistry.address,
          testGuestImage: imageRegistry.testGuestImage,
          noDiskImage: imageRegistry.noDiskImage,
        },
        web: {
          urls: webUrls,
          issuer: oidcProvider.issuer,
          people: DEV_PEOPLE.map(({ user, groups }) => ({ user, groups: [...groups] })),
          password: DEV_PASSWORD,
        },
      };
    },
    cluster,
    imageServer,
    imageRegistry,
    oidcProvider,
    redis,
    sentinelSet,
    managers,
    async control(command) {
      if (command.command === 'redis-lose') {
        if (sentinelSet) return sentinelSet.killAndRestartEmpty();
        return loseRedis(redis!);
      }
      const node = cluster.nodes.find((n) => n.name === command.node);
      if (!node)
        throw new Error(
          `no node ${command.node}; the nodes are ${cluster.nodes.map((n) => n.name).join(', ')}`,
        );
      if (command.command === 'node-stop') return node.stopServices();
      if (command.command === 'node-power-off') return node.powerOff();
      return node.startServices();
    },
    async stop() {
      // The nodes first: their runners power the VMs down while the managers and the apiserver still run.
      await Promise.all(cluster.nodes.map((node) => node.stop(NODE_STOP_GRACE_MS)));
      await Promise.all(managers.map((m) => m.stop(30_000)));
      await redis?.stop(5_000);
      await sentinelSet?.stop();
      await imageRepositories.stop();
      await imageServer.stop();
      await imageRegistry.stop();
      await oidcProvider.stop();
      await cluster.stop();
      await group.release();
    },
  };
}

/** The environment's Redis: one, supervised, or a Sentinel set with the chart's ACL users. */
const newRedisPasswords = (): RedisPasswords => {
  const secret = () => randomBytes(16).toString('hex');
  return { manager: secret(), runner: secret(), replication: secret(), sentinel: secret() };
};

async function startDevRedis(
  layout: RedisLayout,
  host: string,
  dir: string,
  supervision: { logger: Logger; group: ProcessGroup; onStart: () => void },
): Promise<{
  redis?: SupervisedProcess;
  sentinelSet?: SentinelSet;
  redisUrl: string;
  runnerRedisUrl: string;
}> {
  if (layout === 'sentinel') {
    const passwords = newRedisPasswords();
    const sentinelSet = await startSentinelSet({
      passwords,
      sentinelPassword: randomBytes(16).toString('hex'),
      host,
      onStart: supervision.onStart,
      group: supervision.group,
    });
    return {
      sentinelSet,
      redisUrl: sentinelSet.url,
      runnerRedisUrl: sentinelSet.withUser(REDIS_USERS.runner, passwords.runner),
    };
  }
  // With the chart's ACL users (the default user off). A Redis that dies comes back empty on the
  // same address, as one without persistence would: only with the users of its ACL file.
  const passwords = newRedisPasswords();
  const aclFile = join(dir, 'redis-users.acl');
  writeFileSync(aclFile, await redisAclFile(passwords), { mode: 0o600 });
  const start = (port?: number) =>
    startRedis({
      host,
      port,
      extraArgs: ['--aclfile', aclFile, ...REDIS_SETTINGS],
      group: supervision.group,
    });
  const first = await start();
  const redis = await superviseProcess('redis', () => start(first.port), { ...supervision, first });
  const url = (user: string, password: string) => redisUrlWithUser(first.url, user, password);
  return {
    redis,
    redisUrl: url(REDIS_USERS.manager, passwords.manager),
    runnerRedisUrl: url(REDIS_USERS.runner, passwords.runner),
  };
}

/** The single Redis SIGKILLed; resolves once its supervisor has started it again (empty). */
async function loseRedis(redis: SupervisedProcess, timeoutMs = 60_000): Promise<void> {
  const old = redis.ref;
  redis.kill('SIGKILL');
  const deadline = Date.now() + timeoutMs;
  while (redis.ref === old || !redis.alive()) {
    if (Date.now() > deadline) throw new Error(`Redis not back ${timeoutMs / 1000} s after it was killed`);
    await sleep(100);
  }
}

/**
 * The test bed's administrators (group vmop-admins at Dex) may do everything with vmop's objects,
 * and see the nodes (the GUI's nodes page).
 */
function devAdminRbac() {
  const name = 'vmop-dev-admins';
  return [
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name },
      rules: [
        { apiGroups: [GROUP], resources: ['*'], verbs: ['*'] },
        { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: 'oidc:vmop-admins' }],
    },
  ];
}

/**
 * Runs the environment in this process until SIGTERM/SIGINT, with a state file for `vmop dev
 * status`. Every child runs in a process group of the environment's, so even a SIGKILL of this
 * supervisor leaves nothing behind.
 */
/** What `vmop dev up` may choose of the environment. */
export type DevLayout = Pick<StartDevEnvironmentOptions, 'nodes' | 'redis' | 'vmCidrs' | 'kvm'>;

export async function superviseDevEnvironment(dir = devDir(), layout: DevLayout = {}): Promise<void> {
  const logger = createLogger('dev');
  mkdirSync(dir, { recursive: true });
  rmSync(stateFile(dir), { force: true });
  const startedAt = new Date().toISOString();
  const self = processRef(process.pid)!;
  let up = false;
  const writeState = (): DevState => {
    const state = { supervisor: self, ...environment.state, startedAt };
    // Readable by its user only: the Sentinel layout's URLs hold passwords. Written aside and
    // renamed, so `vmop dev up` polling for it never reads a half-written file.
    const partial = `${stateFile(dir)}.partial`;
    writeFileSync(partial, JSON.stringify(state, null, 2), { mode: 0o600 });
    renameSync(partial, stateFile(dir));
    return state;
  };
  const environment: DevEnvironment = await startDevEnvironment({
    dir,
    ...layout,
    logger,
    onRestart: () => up && writeState(),
  });
  up = true;
  logger.info(writeState(), 'dev environment up');
  // After a command, pids have changed (a node's services started again, Redis restarted).
  const control = await serveDevControl(
    controlSocket(dir),
    async (command) => {
      await environment.control(command);
      writeState();
    },
    logger,
  );

  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  logger.info('stopping the dev environment');
  up = false;
  await control.close();
  rmSync(stateFile(dir), { force: true });
  await environment.stop();
  logger.info('dev environment stopped');
}
