import type { Job } from 'bullmq';
import { z } from 'zod';
import { JobDataSchema } from '../job-data.js';
import { failuresFrom, FailureRecordSchema, followUpsFrom } from '../key-state.js';
import { WorkKeySchema } from '../keys.js';
import { KeyQueue, QueueAddressSchema } from '../producer.js';
import {
  countByState,
  foldKeyRows,
  KeyRowSchema,
  KeyStateNameSchema,
  type KeyRow,
  type KeyStateName,
  type QueueSnapshot,
} from './key-rows.js';

export const StatsSchema = z.object({
  queue: z.string(),
  paused: z.boolean(),
  keys: z.record(KeyStateNameSchema, z.number()),
  /** Finished jobs still retained (see RETENTION). */
  completedRetained: z.number(),
  /** Jobs finished in the last minute, per second. */
  throughputPerSecond: z.number(),
  /** Age of the oldest waiting job, null when none waits. */
  oldestWaitingAgeMs: z.number().nullable(),
});
export type Stats = z.infer<typeof StatsSchema>;

export const JobSummarySchema = z.object({
  id: z.string(),
  state: z.string(),
  source: z.string(),
  event: z.unknown().optional(),
  enqueuedAt: z.number(),
  startedAt: z.number().nullable(),
  finishedAt: z.number().nullable(),
  failedReason: z.string().nullable(),
});
export type JobSummary = z.infer<typeof JobSummarySchema>;

export const KeyDetailSchema = KeyRowSchema.extend({
  state: KeyStateNameSchema.or(z.literal('idle')),
  failure: FailureRecordSchema.nullable(),
  /** The payload kept for the run after the active one (an add while the key was active). */
  queuedAfterActive: z.object({ event: z.unknown().optional(), source: z.string() }).nullable(),
  /** Most recent first. */
  recentJobs: z.array(JobSummarySchema),
});
export type KeyDetail = z.infer<typeof KeyDetailSchema>;

const RECENT_JOBS = 20;
const THROUGHPUT_WINDOW_MS = 60_000;

/** Read-mostly view of a work queue for operators: what is queued, running, due again or failing, and why. */
export class QueueInspector {
  private readonly keys: KeyQueue;
  readonly queueName: string;

  constructor(address: z.input<typeof QueueAddressSchema>) {
    const parsed = QueueAddressSchema.parse(address);
    this.queueName = parsed.queueName;
    this.keys = new KeyQueue(parsed);
  }

  /** The BullMQ queue underneath, for bull-board. */
  get bullQueue() {
    return this.keys.queue;
  }

  async list(states?: KeyStateName[]): Promise<KeyRow[]> {
    const rows = foldKeyRows(await this.snapshot());
    return states ? rows.filter((row) => states.includes(row.state)) : rows;
  }

  async stats(): Promise<Stats> {
    const since = Date.now() - THROUGHPUT_WINDOW_MS;
    const redis = this.keys.redis;
    const queue = this.keys.queue;
    const [rows, paused, completedRetained, finishedCompleted, finishedFailed, oldest] = await Promise.all([
      this.list(),
      queue.isPaused(),
      queue.getCompletedCount(),
      redis.zcount(queue.toKey('completed'), since, '+inf'),
      redis.zcount(queue.toKey('failed'), since, '+inf'),
      queue.getJobs(['wait'], 0, 0, true),
    ]);
    const oldestJob = oldest[0];
    return {
      queue: this.queueName,
      paused,
      keys: countByState(rows),
      completedRetained,
      throughputPerSecond: (finishedCompleted + finishedFailed) / (THROUGHPUT_WINDOW_MS / 1000),
      oldestWaitingAgeMs: oldestJob ? Math.max(0, Date.now() - oldestJob.timestamp) : null,
    };
  }

  async show(key: string): Promise<KeyDetail> {
    const workKey = WorkKeySchema.parse(key);
    const [rows, failure, next, jobs] = await Promise.all([
      this.list(),
      this.keys.state.failure(workKey),
      this.keys.redis.hgetall(this.keys.queue.toKey(`dn:${workKey}`)),
      this.keys.queue.getJobs(['active', 'wait', 'failed', 'completed']),
    ]);
    const row = rows.find((r) => r.key === workKey);
    const recent = await Promise.all(
      jobs
        .filter((job) => job.name === workKey)
        .sort((a, b) => b.timestamp - a.timestamp)
        .slice(0, RECENT_JOBS)
        .map((job) => summarize(job)),
    );
    return {
      key: workKey,
      state: row?.state ?? 'idle',
      attempts: row?.attempts ?? 0,
      nextRunAt: row?.nextRunAt ?? null,
      lastError: row?.lastError ?? null,
      failure: failure ?? null,
      queuedAfterActive: next.data ? parseJobData(next.data) : null,
      recentJobs: recent,
    };
  }

  /** Runs the keys now (their failure records stay until a run succeeds). */
  async retry(keys: string[]): Promise<string[]> {
    await this.keys.addMany(keys);
    return keys;
  }

  /** Runs every failing key now: those with a failure record and those left in the failed set. */
  async retryFailed(): Promise<string[]> {
    const [failures, failedJobs] = await Promise.all([
      this.keys.state.failures(),
      this.keys.queue.getFailed(),
    ]);
    const keys = new Set(failures.keys());
    for (const job of failedJobs) if (WorkKeySchema.safeParse(job.name).success) keys.add(job.name);
    return this.retry([...keys].sort());
  }

  async pause(): Promise<void> {
    await this.keys.queue.pause();
  }

  async resume(): Promise<void> {
    await this.keys.queue.resume();
  }

  close(): Promise<void> {
    return this.keys.close();
  }

  /**
   * Jobs, follow-ups and failures read in one transaction: read one by one, a key moving from
   * waiting to active between two reads would be missed by both.
   */
  private async snapshot(): Promise<QueueSnapshot> {
    const { redis, queue, state } = this.keys;
    const replies = await redis
      .multi()
      .lrange(queue.toKey('active'), 0, -1)
      .lrange(queue.toKey('wait'), 0, -1)
      .zrange(state.keys.followUps, '0', '-1', 'WITHSCORES')
      .hgetall(state.keys.failures)
      .exec();
    const [activeIds, waitingIds, followUps, failures] = z
      .tuple([
        z.array(z.string()),
        z.array(z.string()),
        z.array(z.string()),
        z.record(z.string(), z.string()),
      ])
      .parse((replies ?? []).map(([err, reply]) => (err ? undefined : reply)));
    const [active, waiting] = await Promise.all([this.jobNames(activeIds), this.jobNames(waitingIds)]);
    return { active, waiting, followUps: followUpsFrom(followUps), failures: failuresFrom(failures) };
  }

  /** Names (keys) of jobs, without loading whole jobs; jobs removed meanwhile are skipped. */
  private async jobNames(ids: string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const pipeline = this.keys.redis.pipeline();
    for (const id of ids) pipeline.hget(this.keys.queue.toKey(id), 'name');
    const replies = (await pipeline.exec()) ?? [];
    return replies.flatMap(([err, name]) => (!err && typeof name === 'string' ? [name] : []));
  }
}

async function summarize(job: Job): Promise<JobSummary> {
  const data = JobDataSchema.safeParse(job.data);
  return {
    id: job.id ?? '',
    state: await job.getState(),
    source: data.success ? data.data.source : 'unknown',
    ...(data.success && data.data.event !== undefined ? { event: data.data.event } : {}),
    enqueuedAt: job.timestamp,
    startedAt: job.processedOn ?? null,
    finishedAt: job.finishedOn ?? null,
    failedReason: job.failedReason ?? null,
  };
}

function parseJobData(json: string): { event?: unknown; source: string } | null {
  try {
    const data = JobDataSchema.safeParse(JSON.parse(json));
    return data.success ? data.data : null;
  } catch {
    return null;
  }
}
