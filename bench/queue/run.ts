/**
 * `npm run bench:queue`: pushes N keyed items (half of them duplicates) through 1, 2 and 4 worker
 * processes with a no-op handler, once through vmop's queue and once as plain BullMQ jobs (no
 * deduplication, no per-key exclusivity), and prints throughput, enqueue-to-start latency and Redis
 * commands per handled item, with the vmop/plain ratios.
 *
 * Options: --items N (default 20000), --procs 1,2,4, --concurrency 50 (handlers per process),
 * --rounds 5: each process count runs plain then vmop this many times; the table shows each mode's
 * median round and the median of the rounds' throughput ratios (one round on 2 cores varies by
 * ±15%).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { startRedis } from '../../src/devenv/redis.js';
import { bullConnection } from '../../src/queue/connection.js';
import { RETENTION } from '../../src/queue/job-options.js';
import { openWorkQueue } from '../../src/queue/index.js';
import { renderTable } from '../../src/util/table.js';
import { BenchMessageSchema, QUEUE_NAME, type BenchMessage, type BenchWorkerConfig } from './protocol.js';

const { values } = parseArgs({
  options: {
    items: { type: 'string', default: '20000' },
    procs: { type: 'string', default: '1,2,4' },
    concurrency: { type: 'string', default: '50' },
    rounds: { type: 'string', default: '5' },
  },
});
const OptionsSchema = z.object({
  items: z.coerce.number().int().positive().multipleOf(2),
  procs: z
    .string()
    .transform((list) => list.split(',').map((n) => z.coerce.number().int().positive().parse(n))),
  concurrency: z.coerce.number().int().positive(),
  rounds: z.coerce.number().int().positive(),
});
const options = OptionsSchema.parse(values);
const BATCH = 500;
const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));

type Mode = BenchWorkerConfig['mode'];
interface Result {
  mode: Mode;
  procs: number;
  handled: number;
  itemsPerSecond: number;
  handledPerSecond: number;
  p50: number;
  p99: number;
  commandsPerItem: number;
  /** Redis CPU time over the run's wall time: near 1, Redis is the bottleneck. */
  redisBusy: number;
  /** CPU time of all worker processes per handled item. */
  workerCpuUs: number;
}

/** The key of pushed item i: every key is pushed twice, so half the items are duplicates. */
const keyOf = (item: number) => `vm:bench/vm-${item % (options.items / 2)}`;

async function spawnWorker(
  config: BenchWorkerConfig,
): Promise<{ child: ChildProcess; next(): Promise<BenchMessage> }> {
  const child = fork(WORKER, [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, BENCH_WORKER: JSON.stringify(config), VMOP_LOG_LEVEL: 'warn' },
  });
  const inbox: BenchMessage[] = [];
  const waiting: Array<(message: BenchMessage) => void> = [];
  child.on('message', (raw) => {
    const message = BenchMessageSchema.parse(raw);
    const waiter = waiting.shift();
    if (waiter) waiter(message);
    else inbox.push(message);
  });
  const worker = {
    child,
    next: () =>
      new Promise<BenchMessage>((resolve) =>
        inbox.length ? resolve(inbox.shift()!) : waiting.push(resolve),
      ),
  };
  await worker.next();
  return worker;
}

/** CPU seconds the Redis server has used so far (its one command thread and the rest). */
async function redisCpuSeconds(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? NaN);
  return field('used_cpu_user') + field('used_cpu_sys');
}

/** Total commands Redis executed so far, including those run inside Lua scripts. */
async function commandCount(redis: Redis): Promise<number> {
  const info = await redis.info('commandstats');
  let calls = 0;
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
    if (match[1] !== 'info') calls += Number(match[2]);
  return calls;
}

function percentile(sorted: number[], p: number): number {
  return sorted.length === 0
    ? NaN
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/**
 * Time from each add to the start of the run that served it. A vmop run serves every add of its
 * key made before it started and not served yet; its latency is counted from the earliest of them.
 */
function latencies(mode: Mode, addedAt: number[], starts: Array<[string, number]>): number[] {
  if (mode === 'plain') return starts.map(([item, t]) => t - addedAt[Number(item)]!);
  const adds = new Map<string, number[]>();
  addedAt.forEach((t, item) => adds.set(keyOf(item), [...(adds.get(keyOf(item)) ?? []), t]));
  const result: number[] = [];
  for (const [key, t] of [...starts].sort((a, b) => a[1] - b[1])) {
    const pending = adds.get(key) ?? [];
    const served = pending.filter((added) => added <= t);
    if (served.length > 0) result.push(t - Math.min(...served));
    adds.set(
      key,
      pending.filter((added) => added > t),
    );
  }
  return result;
}

async function runScenario(mode: Mode, procs: number): Promise<Result> {
  const server = await startRedis();
  const stats = new Redis(server.url);
  const workers = await Promise.all(
    Array.from({ length: procs }, () =>
      spawnWorker({ mode, redisUrl: server.url, concurrency: options.concurrency }),
    ),
  );
  const vmopQueue =
    mode === 'vmop' ? openWorkQueue({ redisUrl: server.url, queueName: QUEUE_NAME }) : undefined;
  const plainQueue = new Queue(QUEUE_NAME, { connection: bullConnection(server.url) });
  try {
    const before = await commandCount(stats);
    const cpuBefore = await redisCpuSeconds(stats);
    const addedAt: number[] = [];
    const t0 = Date.now();
    for (let first = 0; first < options.items; first += BATCH) {
      const items = Array.from({ length: Math.min(BATCH, options.items - first) }, (_, i) => first + i);
      const now = Date.now();
      for (const item of items) addedAt[item] = now;
      if (vmopQueue) await vmopQueue.addMany(items.map(keyOf));
      else
        await plainQueue.addBulk(
          items.map((item) => ({
            name: keyOf(item),
            data: { item },
            opts: { removeOnComplete: RETENTION.completed, removeOnFail: RETENTION.failed },
          })),
        );
    }
    for (;;) {
      const counts = await plainQueue.getJobCounts('waiting', 'active', 'delayed', 'prioritized');
      if (Object.values(counts).every((n) => n === 0)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const commands = (await commandCount(stats)) - before;
    const redisCpu = (await redisCpuSeconds(stats)) - cpuBefore;
    const wallSeconds = (Date.now() - t0) / 1000;

    const starts: Array<[string, number]> = [];
    let workerCpuMs = 0;
    for (const worker of workers) {
      worker.child.send('report');
      const report = await worker.next();
      if (report.type !== 'report') continue;
      starts.push(...report.starts);
      workerCpuMs += report.cpuMs;
    }
    const lastStart = Math.max(...starts.map(([, t]) => t));
    const sorted = latencies(mode, addedAt, starts).sort((a, b) => a - b);
    return {
      mode,
      procs,
      handled: starts.length,
      itemsPerSecond: options.items / ((lastStart - t0) / 1000),
      handledPerSecond: starts.length / ((lastStart - t0) / 1000),
      p50: percentile(sorted, 50),
      p99: percentile(sorted, 99),
      commandsPerItem: commands / starts.length,
      redisBusy: redisCpu / wallSeconds,
      workerCpuUs: (workerCpuMs * 1000) / starts.length,
    };
  } finally {
    await Promise.all(
      workers.map(async ({ child }) => {
        const exited = once(child, 'exit');
        child.send('stop');
        await exited;
      }),
    );
    await vmopQueue?.close();
    await plainQueue.close();
    stats.disconnect();
    await server.stop();
  }
}

const rows: string[][] = [];
const verdicts: string[] = [];
const median = <T>(items: T[], by: (item: T) => number): T =>
  [...items].sort((a, b) => by(a) - by(b))[Math.floor(items.length / 2)]!;

for (const procs of options.procs) {
  const rounds: Array<{ plain: Result; vmop: Result }> = [];
  for (let round = 0; round < options.rounds; round++)
    rounds.push({ plain: await runScenario('plain', procs), vmop: await runScenario('vmop', procs) });
  const plain = median(
    rounds.map((r) => r.plain),
    (r) => r.itemsPerSecond,
  );
  const vmop = median(
    rounds.map((r) => r.vmop),
    (r) => r.itemsPerSecond,
  );
  const ratios = rounds.map((r) => r.vmop.itemsPerSecond / r.plain.itemsPerSecond);
  for (const r of [vmop, plain]) {
    rows.push([
      String(procs),
      r.mode,
      String(options.items),
      String(r.handled),
      r.itemsPerSecond.toFixed(0),
      r.handledPerSecond.toFixed(0),
      r.p50.toFixed(0),
      r.p99.toFixed(0),
      r.commandsPerItem.toFixed(1),
      `${(r.redisBusy * 100).toFixed(0)}%`,
      r.workerCpuUs.toFixed(0),
    ]);
  }
  const throughput = median(ratios, (ratio) => ratio);
  // vmop handles each key once however often it was pushed, plain every push: compare both.
  const handledRatios = rounds.map((r) => r.vmop.handledPerSecond / r.plain.handledPerSecond);
  const handledThroughput = median(handledRatios, (ratio) => ratio);
  const commands = vmop.commandsPerItem / plain.commandsPerItem;
  rows.push([
    String(procs),
    'vmop/plain',
    '',
    (vmop.handled / plain.handled).toFixed(2),
    throughput.toFixed(2),
    handledThroughput.toFixed(2),
    (vmop.p50 / plain.p50).toFixed(2),
    (vmop.p99 / plain.p99).toFixed(2),
    commands.toFixed(2),
    '',
    (vmop.workerCpuUs / plain.workerCpuUs).toFixed(2),
  ]);
  verdicts.push(
    `${procs} process(es): throughput ${throughput >= 0.8 ? 'meets' : 'MISSES'} ≥ 0.8× plain ` +
      `(rounds: ${ratios.map((ratio) => ratio.toFixed(2)).join(', ')}; handled items/s ` +
      `${handledThroughput.toFixed(2)}× plain, ${vmop.handled} of ${options.items} pushed handled by vmop, ` +
      `${plain.handled} by plain), ` +
      `commands/item ${commands <= 2 ? 'meets' : 'MISSES'} ≤ 2× plain`,
  );
}

console.log(
  `\n${options.items} items (${options.items / 2} keys, each pushed twice in batches of ${BATCH}), ` +
    `no-op handler, concurrency ${options.concurrency} per process\n`,
);
console.log(
  renderTable(
    [
      ...['PROCS', 'QUEUE', 'PUSHED', 'HANDLED', 'ITEMS/S', 'HANDLED/S', 'P50 MS', 'P99 MS'],
      ...['REDIS CMDS/HANDLED', 'REDIS BUSY', 'WORKER CPU µS/HANDLED'],
    ],
    rows,
  ),
);
console.log(`\n${verdicts.join('\n')}`);
console.log(
  '\nitems/s (handled/s): pushed (handled) items / time from the first push to the last handler start. Latency: add → start of the run ' +
    'that served it. Commands: INFO commandstats delta (Lua-internal calls included), over handled items. ' +
    'Redis busy: its CPU time (INFO cpu) over the wall time of the run; near 100% Redis is the bottleneck. ' +
    'Worker CPU: user + system time of the worker processes from ready to report, over handled items.',
);
