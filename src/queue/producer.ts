import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Counter, Registry } from 'prom-client';
import { z } from 'zod';
import { bullConnection, openRedis, RedisUrlSchema } from './connection.js';
import type { JobData } from './job-data.js';
import { keyJobOptions } from './job-options.js';
import { KeyState } from './key-state.js';
import { DEFAULT_QUEUE_NAME, WorkKeySchema } from './keys.js';
import { addsCounter } from './metrics.js';
import { OutageLog } from './outage-log.js';
import { createLogger, type Logger } from '../util/logger.js';

export const QueueAddressSchema = z.object({
  redisUrl: RedisUrlSchema,
  queueName: z.string().min(1).default(DEFAULT_QUEUE_NAME),
});

const AddOptionsSchema = z.object({
  delayMs: z.number().nonnegative().default(0),
  event: z.unknown().optional(),
});

export interface WorkQueue {
  /**
   * Enqueues `key`. With `delayMs` it runs then, unless an earlier run is requested (the earliest
   * wins, and one run satisfies every request made before it started). `event` is kept with the
   * job for inspection (immediate adds only); handlers never see it.
   */
  add(key: string, opts?: { delayMs?: number; event?: unknown }): Promise<void>;
  addMany(keys: string[], opts?: { event?: unknown }): Promise<void>;
  close(): Promise<void>;
}

// addBulk sends one pipeline per call; chunks keep a resync of many keys from building one huge request.
const BULK_CHUNK = 1000;

/** The queue as producers, workers and inspection tools see it: BullMQ jobs plus vmop's per-key state. */
export class KeyQueue implements WorkQueue {
  readonly queue: Queue;
  readonly state: KeyState;
  readonly redis: Redis;
  /** Reports connection trouble of this queue's clients (and of workers sharing it) once per outage. */
  readonly outages: OutageLog;
  private readonly adds?: Counter<'mode'>;

  constructor(
    address: z.input<typeof QueueAddressSchema>,
    opts: { metrics?: Registry; logger?: Logger } = {},
  ) {
    const { redisUrl, queueName } = QueueAddressSchema.parse(address);
    this.outages = new OutageLog(opts.logger ?? createLogger('queue', { queue: queueName }));
    this.queue = new Queue(queueName, { connection: bullConnection(redisUrl) });
    this.queue.on('error', this.outages.error);
    this.redis = openRedis(redisUrl);
    this.redis.on('error', this.outages.error);
    this.redis.on('ready', this.outages.ready);
    this.state = new KeyState(this.redis, queueName);
    if (opts.metrics) this.adds = addsCounter(opts.metrics);
  }

  async add(key: string, opts: { delayMs?: number; event?: unknown } = {}): Promise<void> {
    const workKey = WorkKeySchema.parse(key);
    const { delayMs, event } = AddOptionsSchema.parse(opts);
    if (delayMs > 0) {
      await this.state.requestFollowUp(workKey, Date.now() + delayMs);
      this.adds?.inc({ mode: 'delayed' });
      return;
    }
    await this.queue.add(workKey, jobData(event, 'add'), keyJobOptions(workKey));
    this.adds?.inc({ mode: 'immediate' });
  }

  async addMany(keys: string[], opts: { event?: unknown } = {}): Promise<void> {
    const workKeys = z.array(WorkKeySchema).parse(keys);
    const { event } = AddOptionsSchema.parse(opts);
    await this.enqueue(workKeys, jobData(event, 'add'));
    this.adds?.inc({ mode: 'immediate' }, workKeys.length);
  }

  /** Enqueues keys whose requested follow-up time has come (not counted as adds). */
  async enqueueFollowUps(keys: string[]): Promise<void> {
    await this.enqueue(keys, jobData(undefined, 'follow-up'));
  }

  async close(): Promise<void> {
    await this.queue.close();
    await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private async enqueue(keys: string[], data: JobData): Promise<void> {
    for (let start = 0; start < keys.length; start += BULK_CHUNK) {
      const chunk = keys.slice(start, start + BULK_CHUNK);
      await this.queue.addBulk(chunk.map((key) => ({ name: key, data, opts: keyJobOptions(key) })));
    }
  }
}

function jobData(event: unknown, source: JobData['source']): JobData {
  return event === undefined ? { source } : { event, source };
}

export function openWorkQueue(opts: {
  redisUrl: string;
  queueName?: string;
  /** Counts adds as vmop_queue_adds_total. */
  metrics?: Registry;
}): WorkQueue {
  return new KeyQueue(opts, { metrics: opts.metrics });
}
