/**
 * One worker process of the queue benchmark: a no-op handler that only notes when each run
 * started, either through vmop's startWorkers or as a plain BullMQ Worker.
 */
import { Worker } from 'bullmq';
import { startWorkers } from '../../src/queue/index.js';
import { bullConnection } from '../../src/queue/connection.js';
import { BenchCommandSchema, BenchWorkerConfigSchema, QUEUE_NAME, type BenchMessage } from './protocol.js';

const config = BenchWorkerConfigSchema.parse(JSON.parse(process.env.BENCH_WORKER ?? '{}'));
const starts: Array<[string, number]> = [];
const send = (message: BenchMessage) => process.send!(message);

const workers =
  config.mode === 'vmop'
    ? await startWorkers({
        redisUrl: config.redisUrl,
        queueName: QUEUE_NAME,
        concurrency: config.concurrency,
        handler: async (key) => {
          starts.push([key, Date.now()]);
        },
      })
    : await startPlainWorker();

async function startPlainWorker(): Promise<{ close(): Promise<void> }> {
  const worker = new Worker(
    QUEUE_NAME,
    async (job) => {
      starts.push([String((job.data as { item: number }).item), Date.now()]);
    },
    { connection: bullConnection(config.redisUrl), concurrency: config.concurrency },
  );
  await worker.waitUntilReady();
  return worker;
}

const cpuAtReady = process.cpuUsage();
process.on('message', (raw) => {
  const command = BenchCommandSchema.parse(raw);
  if (command === 'report') {
    const cpu = process.cpuUsage(cpuAtReady);
    send({ type: 'report', starts, cpuMs: (cpu.user + cpu.system) / 1000 });
  }
  if (command === 'stop') void workers.close().then(() => process.exit(0));
});
// The IPC channel closes when the benchmark dies: do not outlive it.
process.on('disconnect', () => process.exit(1));
send({ type: 'ready' });
