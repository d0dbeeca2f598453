import { hostname } from 'node:os';
import { Worker, type Job } from 'bullmq';
import { Registry } from 'prom-client';
import { z } from 'zod';
import { createLogger, type Logger } from '../util/logger.js';
import { BackoffSchema, DEFAULT_BACKOFF } from './backoff.js';
import { bullConnection } from './connection.js';
import type { KeyHandler } from './handler.js';
import { KeyRunner } from './key-runner.js';
import { RESYNC_JOB_NAME, WorkKeySchema } from './keys.js';
import { startFollowUpPump } from './follow-up-pump.js';
import { workerMetrics, type WorkerMetrics } from './metrics.js';
import { KeyQueue, QueueAddressSchema } from './producer.js';
import { resyncAfterReconnects, scheduleResync } from './resync.js';

const isFunction = (value: unknown) => typeof value === 'function';

export const StartWorkersOptionsSchema = QueueAddressSchema.extend({
  handler: z.custom<KeyHandler>(isFunction, 'handler must be a function'),
  /** Keys handled at once by this process. */
  concurrency: z.number().int().positive().default(4),
  backoff: BackoffSchema.default(DEFAULT_BACKOFF),
  /** Handler starts per second across all replicas. */
  rateLimit: z.object({ perSecond: z.number().positive() }).optional(),
  resync: z
    .object({
      everyMs: z.number().int().positive(),
      onResync: z.custom<() => Promise<void>>(isFunction, 'onResync must be a function'),
    })
    .optional(),
  /** How long close() lets running handlers finish before aborting them. */
  shutdownTimeoutMs: z.number().int().nonnegative().default(30_000),
  /**
   * A key whose worker died is handled elsewhere after at most this plus stalledIntervalMs: its
   * lock expires (a live worker renews it every half of this) and the next stalled check frees it.
   */
  lockDurationMs: z.number().int().positive().default(30_000),
  /** How often each worker looks for keys whose locks expired (one Redis script call); default lockDurationMs. */
  stalledIntervalMs: z.number().int().positive().optional(),
  /** Upper bound on how late a follow-up requested by another process is noticed. */
  followUpPollMs: z.number().int().positive().default(500),
  /**
   * A handler running this long is logged (once, with its key): it holds its key, and nothing else
   * runs it meanwhile, so a hung one must show in the logs, not only as a VM that stopped changing.
   */
  longRunWarnMs: z.number().int().positive().default(60_000),
  logger: z.custom<Logger>((value) => typeof value === 'object' && value !== null).optional(),
  metrics: z
    .custom<Registry>((value) => value instanceof Registry, 'metrics must be a prom-client Registry')
    .optional(),
});
export type StartWorkersOptions = z.input<typeof StartWorkersOptionsSchema>;

/** After aborting handlers that outlived the shutdown timeout, how long to wait for them to return. */
const ABORT_GRACE_MS = 2_000;
/** Runs of a key that killed their worker process this often are failed rather than retried. */
const MAX_STALLED_COUNT = 2;

export interface RunningWorkers {
  /** Takes no more keys (the running handlers finish) until resume(). */
  pause(): Promise<void>;
  resume(): void;
  close(): Promise<void>;
}

export async function startWorkers(options: StartWorkersOptions): Promise<RunningWorkers> {
  const opts = StartWorkersOptionsSchema.parse(options);
  const logger = opts.logger ?? createLogger('queue', { queue: opts.queueName });
  const keys = new KeyQueue(opts, { logger });
  const ranHere = new WeakSet<Job>();
  const pump = startFollowUpPump({
    state: keys.state,
    enqueue: (due) => keys.enqueueFollowUps(due),
    pollMs: opts.followUpPollMs,
    logger,
  });
  const metrics: WorkerMetrics | undefined = opts.metrics
    ? workerMetrics(opts.metrics, {
        depth: () => queueDepth(keys),
        oldestWaitingSeconds: () => oldestWaitingSeconds(keys),
        redisWritable: () => redisWritable(keys),
        // Read at scrape time, after the runner exists.
        longestRunningSeconds: (): number => keyRunner.longestRunningSeconds(),
        logger,
      })
    : undefined;
  const keyRunner: KeyRunner = new KeyRunner({
    keys,
    handler: opts.handler,
    backoff: opts.backoff,
    pump,
    metrics,
    logger,
  });

  // One parameter: BullMQ makes an AbortController per job for processors that take a signal;
  // KeyRunner makes one only for a handler that reads it.
  const processor = async (job: Job) => {
    ranHere.add(job);
    if (job.name === RESYNC_JOB_NAME) {
      await opts.resync?.onResync();
      return;
    }
    await keyRunner.run(job);
  };

  const worker = new Worker(opts.queueName, processor, {
    connection: bullConnection(opts.redisUrl),
    name: `${hostname()}:${process.pid}`,
    concurrency: opts.concurrency,
    lockDuration: opts.lockDurationMs,
    stalledInterval: opts.stalledIntervalMs ?? opts.lockDurationMs,
    maxStalledCount: MAX_STALLED_COUNT,
    ...(opts.rateLimit ? { limiter: rateLimiter(opts.rateLimit.perSecond) } : {}),
  });
  worker.on('error', keys.outages.error);
  worker.on('lockRenewalFailed', (jobIds) => {
    for (const jobId of jobIds) {
      // Another replica may take the key once the lock expires: ask the handler to stop.
      keyRunner.cancel(jobId, 'lost the lock on this key');
      logger.warn({ jobId, key: keyRunner.running.get(jobId)?.key }, 'lost a key lock; aborting its handler');
    }
  });
  worker.on('failed', (job) => {
    // Jobs failed without running here: a key whose runs killed their workers too often.
    if (!job || ranHere.has(job) || !WorkKeySchema.safeParse(job.name).success) return;
    void (async () => {
      const prior = await keys.state.failure(job.name);
      await keyRunner.recordFailure(job.name, prior, {
        error: job.failedReason,
        terminal: true,
        jobId: job.id,
      });
    })().catch((err: unknown) => logger.warn({ err, key: job.name }, 'could not record failure'));
  });

  const reconnects = opts.resync
    ? resyncAfterReconnects({ redis: keys.redis, queue: keys.queue, ...opts.resync, logger })
    : undefined;
  if (opts.resync) await scheduleResync(keys.queue, opts.resync.everyMs);
  await worker.waitUntilReady();
  logger.info({ concurrency: opts.concurrency }, 'work queue workers started');
  const longRuns = setInterval(() => keyRunner.warnLongRuns(opts.longRunWarnMs), opts.longRunWarnMs / 4);
  longRuns.unref();

  let closing: Promise<void> | undefined;
  const close = async () => {
    clearInterval(longRuns);
    // First: BullMQ stops fetching keys at once, while the running handlers finish.
    // (A failed close counts as settled, as settlesWithin treats it; caught so it is never unhandled meanwhile.)
    const graceful = worker.close().catch(() => undefined);
    // Bounded: with Redis away, a resync or a pump claim in flight would wait for it forever.
    await settlesWithin(Promise.all([reconnects?.stop(), pump.stop()]), opts.shutdownTimeoutMs);
    if (!(await settlesWithin(graceful, opts.shutdownTimeoutMs))) {
      const stillRunning = [...keyRunner.running.values()].map((r) => r.key);
      logger.warn({ keys: stillRunning }, 'shutdown timeout: aborting handlers');
      keyRunner.cancelAll('worker shutting down');
      if (!(await settlesWithin(graceful, ABORT_GRACE_MS))) {
        // Their keys' locks expire and other replicas take them over.
        logger.warn('handlers ignored the abort; disconnecting without them');
        await worker.disconnect();
      }
    }
    await keys.close();
    logger.info('work queue workers stopped');
  };
  return {
    pause: () => worker.pause(),
    resume: () => worker.resume(),
    close() {
      closing ??= close();
      return closing;
    },
  };
}

function rateLimiter(perSecond: number): { max: number; duration: number } {
  // BullMQ counts whole jobs per window: below one per second, widen the window instead.
  return perSecond >= 1
    ? { max: Math.round(perSecond), duration: 1000 }
    : { max: 1, duration: Math.round(1000 / perSecond) };
}

async function queueDepth(keys: KeyQueue): Promise<Record<string, number>> {
  const [counts, followUps] = await Promise.all([
    keys.queue.getJobCounts('waiting', 'active', 'failed'),
    keys.state.followUpCount(),
  ]);
  return { ...counts, 'follow-up': followUps };
}

async function oldestWaitingSeconds(keys: KeyQueue): Promise<number> {
  const [oldest] = await keys.queue.getJobs(['wait', 'prioritized'], 0, 0, true);
  return oldest ? Math.max(0, (Date.now() - oldest.timestamp) / 1000) : 0;
}

/** A write within 2 s: a Redis that is gone, or a replica left without a master, refuses or stalls. */
const REDIS_PROBE_MS = 2_000;
async function redisWritable(keys: KeyQueue): Promise<boolean> {
  const write = keys.redis.set('vmop:metrics:probe', String(Date.now()), 'PX', 60_000);
  write.catch(() => undefined);
  return (
    (await settlesWithin(write, REDIS_PROBE_MS)) &&
    (await write.then(
      () => true,
      () => false,
    ))
  );
}

async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const settled = promise.then(
    () => true,
    () => true,
  );
  try {
    return await Promise.race([settled, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
