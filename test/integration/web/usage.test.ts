import type { KubernetesObject } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { redisBed } from '../../support/redis-bed.js';
import type { ObjectCache } from '../../../src/kube/object-cache.js';
import { createLogger } from '../../../src/util/logger.js';
import { HISTORY_MS, USAGE_KEY, usageHistory } from '../../../src/web/usage.js';

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
      { t: day, vms: 2, cpus: 6, ramBytes: 3 * 1024 ** 3 },
      { t: day + 60_000, vms: 0, cpus: 0, ramBytes: 0 },
    ]);
  });
});
