// How long a runner's snapshot change takes to show in the VirtualMachine's status, next to the
// queue's own enqueue-to-start latency (used by bench:status and bench:scale). Two loads:
// - closed: every VM publishes its next change as soon as the last one shows (the most the
//   machine takes: latency = VMs / throughput, so it measures throughput, not a runner's pace);
// - boots: every VM publishes what a real runner publishes while its guest boots, at the times it
//   did, and boots again every BOOT_CYCLE_MS (published whatever the status shows, as runners do).
// Real parts: control plane, Redis, manager processes, the runner's own publisher. No qemu: the
// snapshots are published for runner pods that kube-controller-manager really created.
import { CoreV1Api, Watch, type KubeConfig } from '@kubernetes/client-node';
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { redisUrlWithUser, tenantRedisPassword, tenantRedisUser } from '../../src/api/tenant-redis.js';
import { redisAclFile, REDIS_USERS } from '../../src/devenv/redis-acl.js';
import { REDIS_SETTINGS, startRedis } from '../../src/devenv/redis.js';
import { startSentinelSet } from '../../src/devenv/redis-sentinel.js';
import { snapshotRedisKey, type RunnerSnapshot } from '../../src/api/runner-snapshot.js';
import { redisPublisher } from '../../src/runner/publish.js';
import { createLogger } from '../../src/util/logger.js';
import { startManagerProcess, type ManagerProcess } from '../../test/support/manager-process.js';
import { readRequestTotals, requestDelta } from '../support/apiserver-requests.js';
import { quantile } from '../support/quantile.js';
import { startSetFlood } from '../support/set-flood.js';
import { countCpu, pidsOf, type CpuShares } from '../support/cpu-usage.js';

const logger = createLogger('bench', {});
logger.level = 'warn';

/**
 * When a runner published its snapshots while the test guest booted, in ms after the first
 * (test/integration/runner/guest-agent.test.ts's VM under TCG, measured 2026-11-26): runner
 * starting, qemu started, resumed, the agent's port opened, the agent connected, its addresses,
 * and the addresses again at the agent's next 30 s refresh (slirp's IPv6). Then nothing more.
 */
export const BOOT_PUBLISHES_MS = [0, 36, 115, 3175, 3300, 3317, 33_333];
/** Each VM boots again this long after its previous boot began: 7 changes per 40 s per VM. */
export const BOOT_CYCLE_MS = 40_000;

export type StatusLoad = { kind: 'closed'; changes: number } | { kind: 'boots'; seconds: number };

export interface StatusLatency {
  replicas: number;
  load: StatusLoad['kind'];
  changes: number;
  /** Published changes whose status never showed within the wait after the load ended. */
  lost: number;
  /** PATCHes of vms/status the apiserver counted, per change published. */
  statusWritesPerChange: number;
  statusP50: number;
  statusP99: number;
  queueP50: number;
  queueP99: number;
  /** How long the reconcile itself took. */
  handlerP50: number;
  handlerP99: number;
  /** CPU time the manager processes used while the changes were published, per change. */
  managerCpuMsPerChange: number;
  /** Average cores busy while the changes were published: the machine's, and its main users'. */
  cpu: CpuShares;
  /** The apiserver's CPU (all it did) per status PATCH: what one status write costs it. */
  apiserverCpuMsPerStatusWrite: number;
  /** With a flood: how fast another namespace's runner key was written meanwhile, and how often it was refused. */
  flood?: { writesPerSecond: number; refusedBatches: number };
  /** With a master killed: the changes published from the kill until FAILOVER_WINDOW_MS after it. */
  failover?: { changes: number; lost: number; statusP99: number; statusMax: number };
}

/** One Redis, or the Sentinel set of `vmop dev --redis sentinel` (3 Redis, 3 Sentinels, 3 s down-after). */
export type BenchRedis = 'single' | 'sentinel';

/** A published change: when, and how long it took to show in the status (undefined: never). */
interface PublishedChange {
  at: number;
  latency?: number;
}

const latenciesOf = (changes: PublishedChange[]) =>
  changes.flatMap((change) => (change.latency === undefined ? [] : [change.latency]));
/** Changes published this long after the master's SIGKILL count as published during the failover. */
export const FAILOVER_WINDOW_MS = 15_000;

const PASSWORDS = { manager: 'bench', runner: 'bench', replication: 'bench', sentinel: 'bench' };

/**
 * The managers' URL and the base the namespaces' runner users derive from, as the chart sets
 * them: runners publish with their namespace's own credential.
 */
async function startBenchRedis(layout: BenchRedis) {
  if (layout === 'single') {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-bench-redis-'));
    const aclFile = path.join(dir, 'users.acl');
    await writeFile(aclFile, await redisAclFile(PASSWORDS));
    const redis = await startRedis({ extraArgs: ['--aclfile', aclFile, ...REDIS_SETTINGS] });
    const as = (user: string, password: string) => redisUrlWithUser(redis.url, user, password);
    return {
      url: as(REDIS_USERS.manager, PASSWORDS.manager),
      runnerUrl: as(REDIS_USERS.runner, PASSWORDS.runner),
      pids: () => [redis.ref.pid],
      killMaster: undefined,
      stop: async () => {
        await redis.stop();
        await rm(dir, { recursive: true, force: true });
      },
    };
  }
  const set = await startSentinelSet({ passwords: PASSWORDS, sentinelPassword: 'bench' });
  return {
    url: set.url,
    runnerUrl: set.withUser(REDIS_USERS.runner, PASSWORDS.runner),
    pids: () => set.servers.map((server) => server.ref.pid),
    // The set's first server is its master until a failover.
    killMaster: () => set.servers[0]!.kill('SIGKILL'),
    stop: () => set.stop(),
  };
}

/** Bucket counts of a Prometheus histogram, summed over the given /metrics texts. */
function histogramBuckets(texts: string[], name: string): Map<number, number> {
  const buckets = new Map<number, number>();
  for (const text of texts) {
    for (const match of text.matchAll(new RegExp(`^${name}_bucket\\{le="([^"]+)"[^}]*\\} (\\d+)`, 'gm'))) {
      const le = match[1] === '+Inf' ? Infinity : Number(match[1]);
      buckets.set(le, (buckets.get(le) ?? 0) + Number(match[2]));
    }
  }
  return buckets;
}

/** Prometheus' histogram_quantile: linear interpolation inside the bucket that holds the quantile. */
function histogramQuantile(before: Map<number, number>, after: Map<number, number>, q: number): number {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const counts = bounds.map((le) => (after.get(le) ?? 0) - (before.get(le) ?? 0));
  const total = counts.at(-1) ?? 0;
  if (total === 0) return NaN;
  const rank = q * total;
  for (let i = 0; i < bounds.length; i++) {
    if (counts[i]! >= rank) {
      const lower = i === 0 ? 0 : bounds[i - 1]!;
      const upper = bounds[i] === Infinity ? lower : bounds[i]!;
      const below = i === 0 ? 0 : counts[i - 1]!;
      return lower + ((upper - lower) * (rank - below)) / Math.max(1, counts[i]! - below);
    }
  }
  return NaN;
}

async function scrape(managers: ManagerProcess[]): Promise<string[]> {
  return Promise.all(
    managers.map(async (m) => {
      const port = (await m.waitForLog((l) => l.msg === 'manager started')).metricsPort as number;
      return (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    }),
  );
}

export async function measureStatusLatency(
  kubeConfig: KubeConfig,
  kubeconfigPath: string,
  options: {
    replicas: number;
    vms: number;
    load: StatusLoad;
    redis?: BenchRedis;
    /** SIGKILL the Sentinel set's master this long into a boots load. */
    killMasterAtSeconds?: number;
    /** While the load runs, a VM of another namespace has its runner key written in a flood. */
    flood?: boolean;
  },
): Promise<StatusLatency> {
  const { replicas, vms: VMS, load } = options;
  const redis = await startBenchRedis(options.redis ?? 'single');
  const namespace = `bench-${replicas}-${Date.now()}`;
  const kubectl = (args: string[], input?: string) =>
    execFileSync('kubectl', ['--kubeconfig', kubeconfigPath, ...args], { input, encoding: 'utf8' });
  const floodNamespace = `${namespace}-flood`;
  const watched = options.flood ? [namespace, floodNamespace] : [namespace];
  for (const name of watched) kubectl(['create', 'namespace', name]);
  const managers = Array.from({ length: replicas }, () =>
    startManagerProcess(
      [
        ...['--kubeconfig', kubeconfigPath, '--redis', redis.url, '--runner-redis-url', redis.runnerUrl],
        ...watched.flatMap((name) => ['-n', name]),
      ],
      { logLevel: 'info' },
    ),
  );
  await Promise.all(managers.map((m) => m.waitForLog((l) => l.msg === 'manager started')));
  const names = Array.from({ length: VMS }, (_, i) => `vm-${i}`);
  kubectl(
    ['apply', '-f', '-'],
    names
      .map(
        (name) =>
          `apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: ${name}, namespace: ${namespace}}\n` +
          `spec: {vm: {state: Running, maximumCpus: 64, currentCpus: 1, maximumRam: 256Mi}}\n`,
      )
      .join('---\n'),
  );
  if (options.flood)
    kubectl(
      ['apply', '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: pad, namespace: ${floodNamespace}}\n` +
        `spec: {vm: {state: Running, maximumCpus: 1, currentCpus: 1, maximumRam: 256Mi}}\n`,
    );
  const core = kubeConfig.makeApiClient(CoreV1Api);
  // The flooder's key is one the managers follow (its runner pod is there), as her credential's is.
  while (options.flood && (await core.listNamespacedPod({ namespace: floodNamespace })).items.length === 0)
    await new Promise((r) => setTimeout(r, 200));
  const pods = new Map<string, { name: string; uid: string }>();
  while (pods.size < VMS) {
    for (const pod of (await core.listNamespacedPod({ namespace })).items) {
      const vm = pod.metadata!.labels!['app.kubernetes.io/instance']!;
      pods.set(vm, { name: pod.metadata!.name!, uid: pod.metadata!.uid! });
    }
    await new Promise((r) => setTimeout(r, 200));
  }

  // Published changes whose status has not shown yet, by VM; the watch settles them.
  const pending = new Map<string, Array<{ seq: number; change: PublishedChange; shown: () => void }>>();
  /** Every change published, and how long it took to show (undefined: never). */
  const changes: PublishedChange[] = [];
  const settle = (vm: { metadata: { name: string }; status?: { runner?: { seq: number } } }) => {
    const waiting = pending.get(vm.metadata.name);
    const seq = vm.status?.runner?.seq ?? -1;
    if (!waiting?.length) return;
    const now = performance.now();
    // A newer snapshot shows every older one's change too (runners skip what Redis did not take yet).
    while (waiting.length && waiting[0]!.seq <= seq) {
      const { change, shown } = waiting.shift()!;
      change.latency = now - change.at;
      shown();
    }
  };
  const vmsPath = `/apis/vmoperator.jdrupes.org/v1/namespaces/${namespace}/vms`;
  let watch: AbortController | undefined;
  let watching = true;
  let watchRestarts = 0;
  // A watch the apiserver closes (e.g. as too slow a reader when the machine is saturated) is
  // opened again, or every change after it would count as never shown; a new watch begins with
  // every VM as it is now.
  const openWatch = async (): Promise<void> => {
    watch = await new Watch(kubeConfig).watch(
      vmsPath,
      {},
      (_type, vm) => settle(vm),
      () => {
        if (!watching) return;
        watchRestarts++;
        void openWatch().catch((err) => logger.warn({ err }, 'could not watch the VMs again'));
      },
    );
  };
  await openWatch();
  // Connected before the clock starts: a runner's connections are made once, at its start.
  /** A namespace's runner credential, as its runner Secret has it. */
  const runnerUrlOf = (ns: string) =>
    redisUrlWithUser(
      redis.runnerUrl,
      tenantRedisUser('runner', ns),
      tenantRedisPassword(PASSWORDS.runner, 'runner', ns),
    );
  const publishers = names.map((name) =>
    redisPublisher({ redisUrl: runnerUrlOf(namespace), vmKey: `vm:${namespace}/${name}`, logger }),
  );
  const runId = randomUUID();
  let published = 0;
  const publish = (index: number, seq: number): Promise<void> => {
    const name = names[index]!;
    const snapshot: RunnerSnapshot = {
      seq,
      runId,
      pod: pods.get(name)!.name,
      podUid: pods.get(name)!.uid,
      phase: 'running',
      cpus: 1 + ((seq + index) % 64), // every change changes the status
      ram: 256 * 2 ** 20,
      drives: {},
      booted: true,
      updatedAt: new Date().toISOString(),
    };
    published++;
    const change: PublishedChange = { at: performance.now() };
    changes.push(change);
    const shown = new Promise<void>((resolve) => {
      const waiting = pending.get(name) ?? [];
      pending.set(name, waiting);
      waiting.push({ seq, change, shown: resolve });
    });
    publishers[index]!.publish(snapshot, { event: 'BENCH', data: {} } as never);
    return shown;
  };

  const texts = await scrape(managers);
  const before = histogramBuckets(texts, 'vmop_queue_enqueue_to_start_seconds');
  const handlerBefore = histogramBuckets(texts, 'vmop_queue_handler_duration_seconds');
  const requestsBefore = readRequestTotals(kubeconfigPath);
  const controlPlaneDir = path.dirname(kubeconfigPath);
  const cpuShares = countCpu({
    apiserver: () => pidsOf('kube-apiserver', controlPlaneDir),
    etcd: () => pidsOf('etcd', controlPlaneDir),
    managers: () => managers.map((m) => m.pid),
    redis: () => redis.pids(),
    bench: () => [process.pid],
  });
  const flood = options.flood
    ? startSetFlood(runnerUrlOf(floodNamespace), snapshotRedisKey(`vm:${floodNamespace}/pad`))
    : undefined;
  let killedAt: number | undefined;
  if (load.kind === 'closed') {
    await Promise.all(
      names.map(async (_name, index) => {
        for (let seq = 1; seq <= Math.ceil(load.changes / VMS) && published < load.changes; seq++)
          await publish(index, seq);
      }),
    );
  } else {
    const shown: Promise<void>[] = [];
    const timers = names.flatMap((_name, index) => {
      // Boots begin at random times, as a fleet's VMs do not start in step.
      const firstBoot = Math.random() * BOOT_CYCLE_MS;
      const times: number[] = [];
      for (let boot = firstBoot; boot < load.seconds * 1000; boot += BOOT_CYCLE_MS)
        for (const offset of BOOT_PUBLISHES_MS)
          if (boot + offset < load.seconds * 1000) times.push(boot + offset);
      return times.map((time, i) => setTimeout(() => shown.push(publish(index, i + 1)), time));
    });
    if (options.killMasterAtSeconds !== undefined && redis.killMaster)
      timers.push(
        setTimeout(() => {
          killedAt = performance.now();
          redis.killMaster!();
        }, options.killMasterAtSeconds * 1000),
      );
    await new Promise((r) => setTimeout(r, load.seconds * 1000));
    timers.forEach(clearTimeout);
    await Promise.race([Promise.all(shown), new Promise((r) => setTimeout(r, 60_000))]);
  }
  const flooded = await flood?.stop();
  const cpu = cpuShares();
  /** CPU milliseconds a group used while the changes were published. */
  const cpuMs = (group: string) => cpu.busy[group]! * cpu.seconds * 1000;
  const requests = requestDelta(requestsBefore, readRequestTotals(kubeconfigPath));
  const textsAfter = await scrape(managers);
  const after = histogramBuckets(textsAfter, 'vmop_queue_enqueue_to_start_seconds');
  const handlerAfter = histogramBuckets(textsAfter, 'vmop_queue_handler_duration_seconds');
  watching = false;
  watch?.abort();
  if (watchRestarts > 0)
    console.error(`(the bench's watch of the VMs was closed and opened again ${watchRestarts} times)`);
  await Promise.all(publishers.map((p) => p.close()));
  for (const manager of managers) await manager.stop();
  await redis.stop();
  for (const name of watched) kubectl(['delete', 'namespace', name, '--wait=false']);
  const latencies = latenciesOf(changes);
  return {
    replicas,
    load: load.kind,
    changes: published,
    lost: published - latencies.length,
    statusWritesPerChange: (requests.series['PATCH vms/status'] ?? 0) / published,
    statusP50: quantile(latencies, 0.5),
    statusP99: quantile(latencies, 0.99),
    queueP50: histogramQuantile(before, after, 0.5) * 1000,
    queueP99: histogramQuantile(before, after, 0.99) * 1000,
    handlerP50: histogramQuantile(handlerBefore, handlerAfter, 0.5) * 1000,
    handlerP99: histogramQuantile(handlerBefore, handlerAfter, 0.99) * 1000,
    managerCpuMsPerChange: cpuMs('managers') / published,
    cpu,
    apiserverCpuMsPerStatusWrite: cpuMs('apiserver') / (requests.series['PATCH vms/status'] ?? NaN),
    ...(killedAt !== undefined && { failover: failoverFigures(changes, killedAt) }),
    ...(flooded && {
      flood: { writesPerSecond: flooded.writes / (flooded.ms / 1000), refusedBatches: flooded.refused },
    }),
  };
}

/** The changes published while the master was dead or just replaced, and how long they took. */
function failoverFigures(changes: PublishedChange[], killedAt: number) {
  const during = changes.filter(
    (change) => change.at >= killedAt && change.at < killedAt + FAILOVER_WINDOW_MS,
  );
  const shown = latenciesOf(during);
  return {
    changes: during.length,
    lost: during.length - shown.length,
    statusP99: quantile(shown, 0.99),
    statusMax: Math.max(...shown),
  };
}
