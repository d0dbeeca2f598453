import type { KubernetesObject } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { redisBed } from '../../support/redis-bed.js';
import type { ObjectCache } from '../../../src/kube/object-cache.js';
import { createLogger } from '../../../src/util/logger.js';
import { HISTORY_MS, USAGE_KEY, usageHistory } from '../../../src/web/usage.js';
import { parseUsageHistory, usageHistoryKey, withSample } from '../../../src/api/vm-usage-history.js';

const MiB = 1024 * 1024;

/** A watch cache holding just these VMs (the manager's is filled by its watches). */
const cacheOf = (vms: KubernetesObject[]): ObjectCache => ({
  get: () => undefined,
  list: <T extends KubernetesObject>() => vms as T[],
});
const vm = (name: string, phase: string, cpus: number, ram: string) => ({
  metadata: { namespace: 'default', name },
  status: { phase, cpus, ram },
});

describe("the admin view's usage history, in a real Redis", () => {
  let redis: Redis;
  const bed = redisBed();
  beforeAll(() => {
    ({ redis } = bed);
  });

  it('sums the VMs that run, writes each minute once though every replica samples it, and keeps 24 h', async () => {
    const logger = createLogger('usage-test');
    const vms = [vm('a', 'Running', 2, '2Gi'), vm('b', 'Migrating', 4, '1Gi'), vm('c', 'Stopped', 0, '0')];
    const replicas = [
      usageHistory(redis, cacheOf(vms), 60, logger),
      usageHistory(redis, cacheOf([]), 60, logger),
    ];
    const day = Date.UTC(2026, 10, 26);
    await replicas[0]!.sample(day - HISTORY_MS - 60_000); // older than a day once the last is written
    await replicas[0]!.sample(day + 5_000);
    await replicas[1]!.sample(day + 30_000); // the same minute: the first replica's sample stands
    await replicas[1]!.sample(day + 65_000);
    expect(await redis.xlen(USAGE_KEY)).toBe(2);
    expect(await replicas[1]!.read(day + 70_000)).toEqual([
      { t: day, vms: 2, cpus: 6, ramBytes: 3 * 1024 ** 3, cpusUsed: 0, ramUsedBytes: 0 },
      { t: day + 60_000, vms: 0, cpus: 0, ramBytes: 0, cpusUsed: 0, ramUsedBytes: 0 },
    ]);
  });

  it('adds what the running VMs use, from the samples their runners keep: the latest CPU rate and memory', async () => {
    await redis.del(USAGE_KEY);
    const now = Date.UTC(2026, 10, 27, 12);
    const sample = async (name: string, t: number, cpu: number, resident: number) => {
      const key = usageHistoryKey(`vm:default/${name}`);
      const record = { cpu, resident, diskRead: 0, diskWrite: 0 };
      await redis.set(
        key,
        JSON.stringify(withSample(parseUsageHistory(await redis.get(key)), { t, record })),
      );
    };
    await sample('a', now - 20_000, 100, 300 * MiB);
    await sample('a', now - 5_000, 103, 310 * MiB); // 3 s of CPU in 15 s: 0.2 cores
    await sample('b', now - 5_000, 50, 200 * MiB); // one sample: its memory, no rate yet
    await sample('c', now - 600_000, 10, 900 * MiB); // stopped long ago: nothing
    // What a tenant can write with her runner credential counts no more than her VM has: 1 CPU and
    // 1 GiB (plus QEMU's own bound); a sample from the future, nothing.
    await sample('d', now - 20_000, 0, 0);
    await sample('d', now - 5_000, 1e12, 1e15);
    await sample('e', now + 3_600_000, 1e12, 1e15);
    const vms = [
      vm('a', 'Running', 2, '2Gi'),
      vm('b', 'Running', 1, '1Gi'),
      vm('c', 'Stopped', 0, '0'),
      vm('d', 'Running', 1, '1Gi'),
      vm('e', 'Running', 1, '1Gi'),
    ];
    const history = usageHistory(redis, cacheOf(vms), 60, createLogger('usage-test'));
    await history.sample(now);
    const [latest] = await history.read(now + 1_000);
    expect(latest).toMatchObject({ vms: 4, cpus: 5, ramUsedBytes: 510 * MiB + 2048 * MiB });
    expect(latest!.cpusUsed).toBeCloseTo(1.2);
  });
});
