/**
 * `npm run bench:events`: how long a runner's snapshot write in one namespace takes to become a
 * reconcile while another namespace floods (issue 53: 200,000 writes with its runner credential,
 * now SETs of the one key it may write), against the same without a flood, in one run. Real Redis
 * with vmop's settings, the managers' follower of snapshot writes (keyspace notifications, a budget
 * per namespace) and vmop's work queue and workers; the handler only notes when it started (a
 * stand-in for the reconcile, whose cost a flood does not change). The flood is `redis-cli --pipe`,
 * a process of its own, as fast as Redis takes it, again and again while the victim is measured.
 *
 * Options: --events N (victim writes per phase, default 200), --flood N (writes, default 200000).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { snapshotRedisKey } from '../../src/api/runner-snapshot.js';
import { REDIS_SETTINGS, startRedis } from '../../src/devenv/redis.js';
import { openWorkQueue, startWorkers } from '../../src/queue/index.js';
import { followSnapshotWrites } from '../../src/queue/snapshot-writes.js';
import { createLogger } from '../../src/util/logger.js';
import { renderTable } from '../../src/util/table.js';
import { quantile } from '../support/quantile.js';
import { startSetFlood } from '../support/set-flood.js';

const { values } = parseArgs({
  options: { events: { type: 'string', default: '200' }, flood: { type: 'string', default: '200000' } },
});
const options = z
  .object({ events: z.coerce.number().int().positive(), flood: z.coerce.number().int().positive() })
  .parse(values);
const VICTIM = 'vm:team-a/web';
const FLOODER = 'vm:team-b/db';
const SPACING_MS = 20;

const logger = createLogger('bench-events', { level: 'warn' });
const redisServer = await startRedis({ extraArgs: REDIS_SETTINGS });
const redis = new Redis(redisServer.url);
const queue = openWorkQueue({ redisUrl: redisServer.url });
const started = new Map<string, number[]>();
const workers = await startWorkers({
  redisUrl: redisServer.url,
  concurrency: 4,
  handler: async (key) => void (started.get(key) ?? started.set(key, []).get(key)!).push(performance.now()),
  logger,
});
const follower = followSnapshotWrites({
  subscriber: new Redis(redisServer.url, { maxRetriesPerRequest: null }),
  redis,
  keysOf: (namespace) => [snapshotRedisKey(namespace === 'team-a' ? VICTIM : FLOODER)],
  known: (key) => key === VICTIM || key === FLOODER,
  enqueue: (keys) => queue.addMany(keys, { event: { type: 'SNAPSHOT_WRITTEN' } }),
  missed: () => queue.addMany([VICTIM, FLOODER], { event: { type: 'RESYNC' } }),
  logger,
});
for (const namespace of ['team-a', 'team-b']) await follower.refresh(namespace);
while (!started.has(VICTIM) || !started.has(FLOODER)) await sleep(10); // the first follow's catch-up
started.clear();

/** The victim's writes, one every SPACING_MS: from each SET to the next handler start of its key. */
async function victimLatencies(): Promise<number[]> {
  const latencies: number[] = [];
  for (let i = 0; i < options.events; i++) {
    const seen = started.get(VICTIM)?.length ?? 0;
    const sent = performance.now();
    await redis.set(snapshotRedisKey(VICTIM), `{"n":${i}}`);
    while ((started.get(VICTIM)?.length ?? 0) === seen) await sleep(1);
    latencies.push(started.get(VICTIM)![seen]! - sent);
    await sleep(SPACING_MS);
  }
  return latencies;
}

const baseline = await victimLatencies();
// Flood after flood for as long as the victim's writes are measured.
const flood = startSetFlood(redisServer.url, snapshotRedisKey(FLOODER), options.flood);
const during = await victimLatencies();
const { writes, ms: floodMs } = await flood.stop(); // no credential to take away here
// The flooder's last write is reconciled once her budget let it through.
const floodEnded = performance.now();
const lastReconciles = () => started.get(FLOODER)?.at(-1) ?? 0;
for (let i = 0; i < 600 && lastReconciles() < floodEnded; i++) await sleep(100);
const caughtUpMs = lastReconciles() - floodEnded;
const floodReconciles = started.get(FLOODER)?.length ?? 0;

const row = (name: string, ms: number[]) => [
  name,
  String(ms.length),
  quantile(ms, 0.5).toFixed(1),
  quantile(ms, 0.99).toFixed(1),
];
console.log(
  renderTable(
    ['phase', 'events', 'p50 ms', 'p99 ms'],
    [row('no flood', baseline), row(`${options.flood} SETs by another namespace`, during)],
  ),
);
console.log(
  `ratio flood/no flood: p50 ${(quantile(during, 0.5) / quantile(baseline, 0.5)).toFixed(2)}, p99 ${(quantile(during, 0.99) / quantile(baseline, 0.99)).toFixed(2)}`,
);
console.log(
  `the flood: ${writes} writes in ${(floodMs / 1000).toFixed(1)} s; ${floodReconciles} reconciles of the flooder's key, the last ${caughtUpMs.toFixed(0)} ms after the flood ended`,
);

await follower.stop();
await workers.close();
await queue.close();
redis.disconnect();
await redisServer.stop();
