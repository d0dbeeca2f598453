/**
 * `npm run bench:events`: how long a runner event of one namespace takes to become a reconcile
 * while another namespace floods its own event stream (issue 53: 200,000 XADDs with its runner
 * credential), against the same without a flood, in one run. Real Redis, the managers' event pump
 * and vmop's work queue and workers; the handler only notes when it started (a stand-in for the
 * reconcile, whose cost a flood does not change). The flood is `redis-cli --pipe`, a process of
 * its own, as fast as Redis takes it, again and again while the victim's events are measured.
 *
 * Options: --events N (victim events per phase, default 200), --flood N (entries, default 200000).
 */
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { runnerEventsKey } from '../../src/api/tenant-redis.js';
import { startRedis } from '../../src/devenv/redis.js';
import { openWorkQueue, startWorkers } from '../../src/queue/index.js';
import { pumpRunnerEvents } from '../../src/queue/runner-events.js';
import { createLogger } from '../../src/util/logger.js';
import { renderTable } from '../../src/util/table.js';
import { quantile } from '../support/quantile.js';

const { values } = parseArgs({
  options: { events: { type: 'string', default: '200' }, flood: { type: 'string', default: '200000' } },
});
const options = z
  .object({ events: z.coerce.number().int().positive(), flood: z.coerce.number().int().positive() })
  .parse(values);
const VICTIM = 'vm:team-a/web';
const FLOODER = 'vm:team-b/pad';
const SPACING_MS = 20;

const logger = createLogger('bench-events', { level: 'warn' });
const redisServer = await startRedis();
const redis = new Redis(redisServer.url);
const queue = openWorkQueue({ redisUrl: redisServer.url });
const started = new Map<string, number[]>();
const workers = await startWorkers({
  redisUrl: redisServer.url,
  concurrency: 4,
  handler: async (key) => void (started.get(key) ?? started.set(key, []).get(key)!).push(performance.now()),
  logger,
});
const pump = pumpRunnerEvents({
  redis: new Redis(redisServer.url, { maxRetriesPerRequest: null }),
  namespaces: () => ['team-a', 'team-b'],
  enqueue: (key, event) => queue.add(key, { event }),
  known: (key) => key === VICTIM || key === FLOODER,
  overflowed: (namespace) => queue.add(`vm:${namespace}/pad`, { event: { type: 'RESYNC' } }),
  consumer: 'bench',
  logger,
});

/** The victim's events, one every SPACING_MS: from each XADD to the next handler start of its key. */
async function victimLatencies(): Promise<number[]> {
  const latencies: number[] = [];
  for (let i = 0; i < options.events; i++) {
    const seen = started.get(VICTIM)?.length ?? 0;
    const sent = performance.now();
    await redis.xadd(runnerEventsKey('team-a'), '*', 'key', VICTIM, 'event', `{"n":${i}}`);
    while ((started.get(VICTIM)?.length ?? 0) === seen) await sleep(1);
    latencies.push(started.get(VICTIM)![seen]! - sent);
    await sleep(SPACING_MS);
  }
  return latencies;
}

/** The tenant's flood: `count` XADDs on her stream through redis-cli --pipe (RESP on its stdin). */
function flood(count: number): Promise<number> {
  const stream = runnerEventsKey('team-b');
  const resp = (args: string[]) =>
    `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
  const one = resp(['XADD', stream, '*', 'key', FLOODER, 'event', '{}']);
  const begin = performance.now();
  const child = spawn('redis-cli', ['-p', String(redisServer.port), '--pipe'], {
    stdio: ['pipe', 'ignore', 'inherit'],
  });
  child.stdin.end(one.repeat(count));
  return new Promise((resolve, reject) =>
    child.on('exit', (code) =>
      code === 0 ? resolve(performance.now() - begin) : reject(new Error(`redis-cli exited ${code}`)),
    ),
  );
}

const baseline = await victimLatencies();
// Flood after flood for as long as the victim's events are measured.
let measuring = true;
let floods = 0;
const flooding = (async () => {
  let ms = 0;
  while (measuring) {
    ms += await flood(options.flood);
    floods++;
  }
  return ms;
})();
const during = await victimLatencies();
measuring = false;
const floodMs = await flooding;
// The flooded stream drains: what is left of it once the pump caught up.
for (let i = 0; i < 600 && (await redis.xlen(runnerEventsKey('team-b'))) > 0; i++) await sleep(100);
const left = await redis.xlen(runnerEventsKey('team-b'));
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
    [row('no flood', baseline), row(`${options.flood} XADDs by another namespace`, during)],
  ),
);
console.log(
  `ratio flood/no flood: p50 ${(quantile(during, 0.5) / quantile(baseline, 0.5)).toFixed(2)}, p99 ${(quantile(during, 0.99) / quantile(baseline, 0.99)).toFixed(2)}`,
);
console.log(
  `the flood: ${floods} × ${options.flood} entries written in ${(floodMs / 1000).toFixed(1)} s; ${floodReconciles} reconciles of the flooder's key; ${left} entries left in its stream`,
);

await pump.stop();
await workers.close();
await queue.close();
redis.disconnect();
await redisServer.stop();
