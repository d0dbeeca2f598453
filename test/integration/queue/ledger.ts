import { z } from 'zod';

/** How a test worker process is set up (passed as JSON in VMOP_TEST_WORKER). */
export const WorkerConfigSchema = z.object({
  queueUrl: z.string(),
  ledgerUrl: z.string(),
  queueName: z.string().default('vmop'),
  concurrency: z.number().int().positive().default(4),
  lockDurationMs: z.number().int().positive().default(30_000),
  stalledIntervalMs: z.number().int().positive().optional(),
  shutdownTimeoutMs: z.number().int().nonnegative().default(10_000),
  followUpPollMs: z.number().int().positive().default(200),
  longRunWarnMs: z.number().int().positive().optional(),
  backoff: z.object({ baseMs: z.number(), capMs: z.number() }).optional(),
  resync: z.object({ everyMs: z.number().int().positive(), keys: z.array(z.string()) }).optional(),
  rateLimit: z.object({ perSecond: z.number().positive() }).optional(),
});
export type WorkerConfig = z.input<typeof WorkerConfigSchema>;

/** What the test handler does for one key; set in the ledger before or while the key runs. */
export const BehaviourSchema = z.object({
  sleepMs: z.number().default(0),
  jitterMs: z.number().default(0),
  /** Block until the test calls release(key). */
  holdUntilReleased: z.boolean().default(false),
  /** Throw on attempts 1..failTimes. */
  failTimes: z.number().int().default(0),
  terminal: z.boolean().default(false),
  requeueAfter: z.number().optional(),
  /** How many runs (in total) return requeueAfter. */
  requeueTimes: z.number().int().default(1),
});
export type Behaviour = z.input<typeof BehaviourSchema>;

export const LedgerEventSchema = z.object({
  type: z.enum(['start', 'end', 'resync', 'closing', 'closed']),
  pid: z.number(),
  /** Position in one total order kept by the ledger Redis (INCR): comparable across processes. */
  seq: z.number(),
  t: z.number(),
  key: z.string().optional(),
  attempt: z.number().optional(),
  startSeq: z.number().optional(),
  outcome: z.string().optional(),
});
export type LedgerEvent = z.infer<typeof LedgerEventSchema>;

export const ledgerKeys = {
  seq: 'ledger:seq',
  events: 'ledger:events',
  behaviour: 'ledger:behaviour',
  release: (key: string) => `ledger:release:${key}`,
  requeues: (key: string) => `ledger:requeues:${key}`,
};
