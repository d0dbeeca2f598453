// How long a runner's snapshot change takes to show in the VirtualMachine's status, next to the
// queue's own enqueue-to-start latency (used by bench:status and bench:scale).
// Real parts: control plane, Redis, manager processes, the runner's own publisher. No qemu: the
// snapshots are published for runner pods that kube-controller-manager really created.
import { CoreV1Api, Watch, type KubeConfig } from '@kubernetes/client-node';
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { startRedis } from '../../src/devenv/redis.js';
import type { RunnerSnapshot } from '../../src/api/runner-snapshot.js';
import { redisPublisher } from '../../src/runner/publish.js';
import { createLogger } from '../../src/util/logger.js';
import { startManagerProcess, type ManagerProcess } from '../../test/support/manager-process.js';

const logger = createLogger('bench', {});
logger.level = 'warn';

export interface StatusLatency {
  replicas: number;
  changes: number;
  statusP50: number;
  statusP99: number;
  queueP50: number;
  queueP99: number;
  /** How long the reconcile itself took. */
  handlerP50: number;
  handlerP99: number;
  /** CPU time the manager processes used while the changes were published, per change. */
  managerCpuMsPerChange: number;
}

/** User + system CPU seconds of a process so far (Linux: /proc/<pid>/stat, in clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

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
  options: { replicas: number; vms: number; changes: number },
): Promise<StatusLatency> {
  const { replicas, vms: VMS, changes: CHANGES } = options;
  const redis = await startRedis();
  const namespace = `bench-${replicas}-${Date.now()}`;
  const kubectl = (args: string[], input?: string) =>
    execFileSync('kubectl', ['--kubeconfig', kubeconfigPath, ...args], { input, encoding: 'utf8' });
  kubectl(['create', 'namespace', namespace]);
  const managers = Array.from({ length: replicas }, () =>
    startManagerProcess(['--kubeconfig', kubeconfigPath, '--redis', redis.url, '-n', namespace], {
      logLevel: 'info',
    }),
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
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const pods = new Map<string, { name: string; uid: string }>();
  while (pods.size < VMS) {
    for (const pod of (await core.listNamespacedPod({ namespace })).items) {
      const vm = pod.metadata!.labels!['app.kubernetes.io/instance']!;
      pods.set(vm, { name: pod.metadata!.name!, uid: pod.metadata!.uid! });
    }
    await new Promise((r) => setTimeout(r, 200));
  }

  // Status watch: resolves the waiter of a VM once its status shows the published seq.
  const waiters = new Map<string, { seq: number; resolve: () => void }>();
  const watch = await new Watch(kubeConfig).watch(
    `/apis/vmoperator.jdrupes.org/v1/namespaces/${namespace}/vms`,
    {},
    (_type, vm: { metadata: { name: string }; status?: { runner?: { seq: number } } }) => {
      const waiter = waiters.get(vm.metadata.name);
      if (waiter && (vm.status?.runner?.seq ?? -1) >= waiter.seq) {
        waiters.delete(vm.metadata.name);
        waiter.resolve();
      }
    },
    () => undefined,
  );

  const texts = await scrape(managers);
  const before = histogramBuckets(texts, 'vmop_queue_enqueue_to_start_seconds');
  const handlerBefore = histogramBuckets(texts, 'vmop_queue_handler_duration_seconds');
  const latencies: number[] = [];
  const managersCpu = () => managers.reduce((sum, m) => sum + cpuSeconds(m.pid), 0);
  const cpuBefore = managersCpu();
  await Promise.all(
    names.map(async (name, index) => {
      const publisher = redisPublisher({ redisUrl: redis.url, vmKey: `vm:${namespace}/${name}`, logger });
      const runId = randomUUID();
      for (let seq = 1; seq <= Math.ceil(CHANGES / VMS) && latencies.length < CHANGES; seq++) {
        const snapshot: RunnerSnapshot = {
          seq,
          runId,
          pod: pods.get(name)!.name,
          podUid: pods.get(name)!.uid,
          phase: 'running',
          cpus: 1 + ((seq + index) % 64),
          ram: 256 * 2 ** 20,
          drives: {},
          booted: true,
          updatedAt: new Date().toISOString(),
        };
        const shown = new Promise<void>((resolve) => waiters.set(name, { seq, resolve }));
        const start = performance.now();
        publisher.publish(snapshot, { event: 'BENCH', data: {} } as never);
        await shown;
        latencies.push(performance.now() - start);
      }
      await publisher.close();
    }),
  );
  const managerCpuSeconds = managersCpu() - cpuBefore;
  const textsAfter = await scrape(managers);
  const after = histogramBuckets(textsAfter, 'vmop_queue_enqueue_to_start_seconds');
  const handlerAfter = histogramBuckets(textsAfter, 'vmop_queue_handler_duration_seconds');
  watch.abort();
  for (const manager of managers) await manager.stop();
  await redis.stop();
  kubectl(['delete', 'namespace', namespace, '--wait=false']);
  const sorted = latencies.sort((a, b) => a - b);
  return {
    replicas,
    changes: sorted.length,
    statusP50: quantile(sorted, 0.5),
    statusP99: quantile(sorted, 0.99),
    queueP50: histogramQuantile(before, after, 0.5) * 1000,
    queueP99: histogramQuantile(before, after, 0.99) * 1000,
    handlerP50: histogramQuantile(handlerBefore, handlerAfter, 0.5) * 1000,
    handlerP99: histogramQuantile(handlerBefore, handlerAfter, 0.99) * 1000,
    managerCpuMsPerChange: (managerCpuSeconds * 1000) / sorted.length,
  };
}
