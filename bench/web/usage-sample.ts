// npm run bench:usage — what one sample of the admin chart's usage history costs a manager replica
// now that it reads what the VMs use (the two latest samples of each running VM's runner, in one
// pipelined round trip to Redis) beside what they hold (the watch cache): 1000 running VMs against
// 10 (the baseline), in one run. A replica samples once per web.usageSampleSeconds (60 s).
// Real Redis; the watch cache is the manager's in-memory list of VMs, here a list of 10 or 1000.
import type { KubernetesObject } from '@kubernetes/client-node';
import { Redis } from 'ioredis';
import { usageHistoryKey } from '../../src/api/vm-usage-history.js';
import { startRedis } from '../../src/devenv/redis.js';
import type { ObjectCache } from '../../src/kube/object-cache.js';
import { createLogger } from '../../src/util/logger.js';
import { USAGE_KEY, usageHistory } from '../../src/web/usage.js';
import { quantile } from '../support/quantile.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 30);
const SIZES = (process.env.BENCH_USAGE_VMS ?? '10,1000').split(',').map(Number);

const server = await startRedis();
const redis = new Redis(server.url);
const logger = createLogger('bench');
logger.level = 'warn';
try {
  const medians = new Map<number, number>();
  for (const size of SIZES) {
    const vms = Array.from({ length: size }, (_, i) => ({
      metadata: { namespace: 'bench', name: `vm-${i}` },
      status: { phase: 'Running', cpus: 2, ram: '2Gi' },
    }));
    const now = Date.now();
    const pipeline = redis.pipeline();
    for (const vm of vms)
      pipeline.set(
        usageHistoryKey(`vm:bench/${vm.metadata.name}`),
        JSON.stringify(
          [
            [20_000, 100],
            [5_000, 103],
          ].map(([ago, cpu]) => ({
            t: now - ago!,
            record: { cpu: cpu!, resident: 300 * 1024 * 1024, diskRead: 0, diskWrite: 0 },
          })),
        ),
      );
    await pipeline.exec();
    const cache: ObjectCache = {
      get: () => undefined,
      list: <T extends KubernetesObject>() => vms as unknown as T[],
    };
    const history = usageHistory(redis, cache, 60, logger);
    const times: number[] = [];
    for (let run = 0; run < RUNS; run++) {
      await redis.del(USAGE_KEY); // each run writes its slot
      const started = performance.now();
      await history.sample(now + run);
      times.push(performance.now() - started);
    }
    const [latest] = await history.read(now + RUNS);
    medians.set(size, quantile(times, 0.5));
    console.log(
      `${size} running VMs: one sample min ${Math.min(...times).toFixed(1)} ms, median ${quantile(times, 0.5).toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms (busy ${latest?.cpusUsed.toFixed(1)} CPUs)`,
    );
    await redis.flushall();
  }
  const [baseline, ...others] = SIZES;
  for (const size of others)
    console.log(`ratio ${size}/${baseline}: ${(medians.get(size)! / medians.get(baseline!)!).toFixed(1)}`);
} finally {
  redis.disconnect();
  await server.stop();
}
