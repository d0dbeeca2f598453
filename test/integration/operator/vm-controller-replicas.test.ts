import { CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { eventually } from '../../support/eventually.js';
import { createTestNamespace, kubectl, sharedKubeConfig } from '../../support/kube.js';
import { startManagerProcess, type LogLine, type ManagerProcess } from '../../support/manager-process.js';
import {
  loggedRequests,
  objectReadPaths,
  REQUEST_LOG_PRELOAD,
  requestLogDir,
} from '../../support/request-log.js';

const VM_COUNT = 200;
const kubeConfig = sharedKubeConfig();
const core = kubeConfig.makeApiClient(CoreV1Api);
const custom = kubeConfig.makeApiClient(CustomObjectsApi);

interface Interval {
  key: string;
  pid: number;
  start: number;
  end: number;
}

/** Pairs each process's "reconcile start"/"reconcile end" lines per key; an unfinished run ends at `cutoff`. */
function reconcileIntervals(manager: ManagerProcess, cutoff: number): Interval[] {
  const open = new Map<string, number>();
  const intervals: Interval[] = [];
  for (const line of manager.logs) {
    if (line.msg === 'reconcile start') open.set(line.key!, line.time);
    if (line.msg === 'reconcile end' && open.has(line.key!)) {
      intervals.push({ key: line.key!, pid: line.pid, start: open.get(line.key!)!, end: line.time });
      open.delete(line.key!);
    }
  }
  for (const [key, start] of open) intervals.push({ key, pid: manager.pid, start, end: cutoff });
  return intervals;
}

function overlapsPerKey(intervals: Interval[]): Interval[][] {
  const byKey = new Map<string, Interval[]>();
  for (const interval of intervals) byKey.set(interval.key, [...(byKey.get(interval.key) ?? []), interval]);
  const overlaps: Interval[][] = [];
  for (const runs of byKey.values()) {
    runs.sort((a, b) => a.start - b.start);
    for (let i = 1; i < runs.length; i++)
      if (runs[i]!.start < runs[i - 1]!.end) overlaps.push([runs[i - 1]!, runs[i]!]);
  }
  return overlaps;
}

describe('two manager replicas on one queue', () => {
  let redis: RedisServer;
  let namespace: string;
  const managers: ManagerProcess[] = [];
  /** Every apiserver request the managers make themselves (test/support/request-log.mjs). */
  const requestLog = requestLogDir();
  const start = () => {
    const manager = startManagerProcess(
      [
        ...['--kubeconfig', inject('kubeconfigPath'), '--redis', redis.url, '-n', namespace],
        ...['--resync-interval', '5'],
      ],
      { env: { NODE_OPTIONS: `--import ${REQUEST_LOG_PRELOAD}`, VMOP_REQUEST_LOG: requestLog } },
    );
    managers.push(manager);
    return manager;
  };

  beforeAll(async () => {
    await installCrds(kubeConfig);
    const ns = await createTestNamespace(kubeConfig, 'replicas');
    namespace = ns.name;
    redis = await startRedis();
    return ns.cleanup;
  });

  afterAll(async () => {
    for (const manager of managers) await manager.stop();
    await redis?.stop();
  });

  const listVms = async () =>
    (
      await custom.listNamespacedCustomObject({
        group: 'vmoperator.jdrupes.org',
        version: 'v1',
        plural: 'vms',
        namespace,
      })
    ).items as Array<{
      metadata: { name: string; generation: number; resourceVersion: string };
      status?: { observedGeneration?: number };
    }>;

  const versions = async () => {
    const [vms, maps] = await Promise.all([
      listVms(),
      core.listNamespacedConfigMap({ namespace, labelSelector: 'app.kubernetes.io/managed-by=vm-operator' }),
    ]);
    return {
      vms: Object.fromEntries(vms.map((o) => [o.metadata.name, o.metadata.resourceVersion])),
      configMaps: Object.fromEntries(
        maps.items.map((o) => [o.metadata!.name!, o.metadata!.resourceVersion!]),
      ),
    };
  };

  it(`reconcile ${VM_COUNT} VMs without concurrent work on a key, and converge after one is killed`, async () => {
    const [first, second] = [start(), start()];
    await Promise.all(managers.map((m) => m.waitForLog((l) => l.msg === 'manager started')));
    const manifests = Array.from(
      { length: VM_COUNT },
      (_, i) =>
        `apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: vm-${i}, namespace: ${namespace}}\n` +
        `spec: {vm: {state: Stopped, maximumCpus: 2, currentCpus: 1, maximumRam: 512Mi}}\n`,
    ).join('---\n');
    await kubectl(['apply', '-f', '-'], manifests);

    // Kill one replica with SIGKILL while it is busy.
    await first.waitForLog((l: LogLine) => l.msg === 'reconcile start' && l.time > 0, 120_000);
    await eventually(() =>
      expect(first.logs.filter((l) => l.msg === 'reconcile end').length).toBeGreaterThan(20),
    );
    const killedAt = Date.now();
    await first.stop('SIGKILL');

    await eventually(
      async () => {
        const vms = await listVms();
        expect(vms.filter((vm) => vm.status?.observedGeneration === vm.metadata.generation)).toHaveLength(
          VM_COUNT,
        );
        const maps = await core.listNamespacedConfigMap({ namespace });
        expect(maps.items.filter((m) => m.metadata?.name?.startsWith('vm-'))).toHaveLength(VM_COUNT);
        // Stopped VMs have no runner pod.
        expect((await core.listNamespacedPod({ namespace })).items).toEqual([]);
      },
      240_000,
      1000,
    );

    const intervals = [...reconcileIntervals(first, killedAt), ...reconcileIntervals(second, Date.now())];
    expect(new Set(intervals.map((i) => i.pid)).size).toBe(2); // both replicas did work
    expect(overlapsPerKey(intervals)).toEqual([]);
    expect(second.logs.filter((l) => l.level >= 50)).toEqual([]);
    expect(first.logs.filter((l) => l.level >= 50)).toEqual([]);
  }, 400_000);

  it('a resync of the unchanged VMs writes nothing', async () => {
    const survivor = managers[1]!;
    // Quiet: nothing changes over two seconds.
    const before = await eventually(
      async () => {
        const first = await versions();
        await new Promise((resolve) => setTimeout(resolve, 2000));
        expect(await versions()).toEqual(first);
        return first;
      },
      120_000,
      0,
    );
    expect(Object.keys(before.configMaps)).toHaveLength(VM_COUNT);
    const since = Date.now();
    const resync = await survivor.waitForLog(
      (l) => l.msg === 'resync enqueued all VMs and operations' && l.time > since,
      60_000,
    );
    expect(resync.keys).toBe(VM_COUNT);
    // Wait until every VM was reconciled after that resync.
    await eventually(
      () => {
        const done = new Set(
          survivor.logs.filter((l) => l.msg === 'reconcile end' && l.time > resync.time).map((l) => l.key),
        );
        expect(done.size).toBe(VM_COUNT);
      },
      120_000,
      500,
    );
    expect(survivor.logs.filter((l) => l.msg === 'reconciled' && l.time > resync.time)).toEqual([]);
    expect(await versions()).toEqual(before);
  }, 200_000);

  it('reads every object from its caches: no GET of an object through creation, a kill, changes and resyncs', async () => {
    const survivor = managers[1]!;
    // A storm of spec changes on top of the creation, takeover and resync above.
    const since = Date.now();
    const changed = Array.from({ length: 50 }, (_, i) => `vm-${i}`);
    await Promise.all(
      changed.map((name) =>
        custom.patchNamespacedCustomObject(
          {
            group: 'vmoperator.jdrupes.org',
            version: 'v1',
            plural: 'vms',
            namespace,
            name,
            body: { spec: { vm: { currentRam: '384Mi', state: 'Running' } } },
          },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
      ),
    );
    await eventually(
      () => {
        const done = new Set(
          survivor.logs.filter((l) => l.msg === 'reconciled' && l.time > since).map((l) => l.key),
        );
        expect(done.size).toBe(changed.length);
      },
      120_000,
      500,
    );
    // Both replicas' requests since they started, the killed one's included.
    expect(objectReadPaths(requestLog, 0, Date.now())).toEqual([]);
    // The hook saw the managers' requests: their writes of these VMs' status are there.
    const statusWrites = loggedRequests(requestLog, since, Date.now()).filter(
      (r) => r.method === 'PATCH' && r.path.endsWith('/status'),
    );
    expect(statusWrites.length).toBeGreaterThanOrEqual(changed.length);
  }, 200_000);
});
