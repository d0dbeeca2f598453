/**
 * `npm run bench:takeover`: what the manager's key-lock settings cost in Redis. Two worker
 * replicas (in this process, a no-op handler) on a private Redis, once with the baseline settings
 * (lock 10 s, stalled check every 10 s, vmop before) and once with the manager's KEY_LOCK, at idle
 * and under a steady load of keys; prints Redis commands per second and the ratio to the baseline.
 * The takeover time itself is shown by test/integration/queue/queue-faults.test.ts.
 *
 * Options: --seconds N per measurement (default 30), --rate keys per second under load (default 20).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { startRedis } from '../../src/devenv/redis.js';
import { KEY_LOCK } from '../../src/operator/manager.js';
import { renderTable } from '../../src/util/table.js';
import { openWorkQueue, startWorkers } from '../../src/queue/index.js';
import { createLogger } from '../../src/util/logger.js';

const { values } = parseArgs({
  options: { seconds: { type: 'string', default: '30' }, rate: { type: 'string', default: '20' } },
});
const options = z
  .object({ seconds: z.coerce.number().positive(), rate: z.coerce.number().positive() })
  .parse(values);

const SETTINGS = {
  'baseline (10 s / 10 s)': { lockDurationMs: 10_000, stalledIntervalMs: 10_000 },
  [`KEY_LOCK (${KEY_LOCK.lockDurationMs / 1000} s / ${KEY_LOCK.stalledIntervalMs / 1000} s)`]: KEY_LOCK,
};

async function commandsProcessed(redis: Redis): Promise<number> {
  const info = await redis.info('stats');
  return Number(/total_commands_processed:(\d+)/.exec(info)![1]);
}

async function measure(lock: typeof KEY_LOCK, load: boolean): Promise<number> {
  const server = await startRedis();
  const redis = new Redis(server.url);
  const logger = createLogger('bench');
  const workers = await Promise.all(
    [0, 1].map(() =>
      startWorkers({ redisUrl: server.url, handler: async () => {}, concurrency: 4, ...lock, logger }),
    ),
  );
  const producer = openWorkQueue({ redisUrl: server.url });
  let producing = load;
  const produce = async () => {
    for (let i = 0; producing; i++) {
      await producer.add(`vm:bench/vm-${i % 100}`, { event: { type: 'bench' } });
      await sleep(1000 / options.rate);
    }
  };
  const producer$ = produce();
  await sleep(3_000); // past start-up
  const before = await commandsProcessed(redis);
  await sleep(options.seconds * 1000);
  const perSecond = ((await commandsProcessed(redis)) - before) / options.seconds;
  producing = false;
  await producer$;
  await producer.close();
  await Promise.all(workers.map((w) => w.close()));
  redis.disconnect();
  await server.stop();
  return perSecond;
}

const rows: string[][] = [];
for (const load of [false, true]) {
  const results: Array<[string, number]> = [];
  for (const [name, lock] of Object.entries(SETTINGS)) results.push([name, await measure(lock, load)]);
  const baseline = results[0]![1];
  for (const [name, perSecond] of results) {
    rows.push([
      load ? `load ${options.rate} keys/s` : 'idle',
      name,
      perSecond.toFixed(1),
      (perSecond / baseline).toFixed(2),
    ]);
  }
}
console.log(
  `Redis commands per second, 2 worker replicas, ${options.seconds} s each (producer's commands included under load)`,
);
console.log(renderTable(['', 'lock / stalled check', 'commands/s', 'ratio'], rows));
