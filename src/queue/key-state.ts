import type { Redis } from 'ioredis';
import { z } from 'zod';
import { vmopRedisKeys } from './keys.js';
import { LuaScript } from './lua-script.js';

/** Why a key's last run failed; kept until a run of the key succeeds. */
export const FailureRecordSchema = z.object({
  /** Consecutive failed runs. */
  attempts: z.number().int().positive(),
  error: z.string(),
  failedAt: z.number(),
  /** A TerminalError: no retry is scheduled. */
  terminal: z.boolean(),
  /** The BullMQ job left in the failed set for this failure (one per key). */
  jobId: z.string().optional(),
});
export type FailureRecord = z.infer<typeof FailureRecordSchema>;

// Due entries are not removed when claimed but pushed to a lease time: a pump that dies between
// claiming and enqueueing loses nothing, the entries fall due again when the lease ends.
const CLAIM_DUE = new LuaScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, key in ipairs(due) do redis.call('ZADD', KEYS[1], 'XX', ARGV[3], key) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {due, first[2] or ''}
`);

// Removes claimed entries only if still at the lease score: an earlier request that arrived
// meanwhile (ZADD LT lowered the score) must survive.
const RELEASE_CLAIMED = new LuaScript(`
local released = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    released = released + 1
  end
end
return released
`);

// The start of runs: each drops its key's pending follow-up and reads its failure record.
const BEGIN_RUNS = new LuaScript(`
redis.call('ZREM', KEYS[1], unpack(ARGV))
return redis.call('HMGET', KEYS[2], unpack(ARGV))
`);
/** Keys per BEGIN_RUNS call: well below Lua's limit on unpacked arguments. */
const BEGIN_BATCH_MAX = 1000;

interface PendingBegin {
  key: string;
  resolve(failure: FailureRecord | undefined): void;
  reject(err: unknown): void;
}

/**
 * vmop's per-key state beside BullMQ's jobs: requested follow-up times (earliest wins) and the
 * failure record that drives backoff.
 */
export class KeyState {
  /** Where the state lives, for readers that need it in one transaction with BullMQ's lists. */
  readonly keys: ReturnType<typeof vmopRedisKeys>;
  /** Run starts waiting for the next BEGIN_RUNS call. */
  private pendingBegins: PendingBegin[] = [];

  constructor(
    private readonly redis: Redis,
    queueName: string,
  ) {
    this.keys = vmopRedisKeys(queueName);
  }

  /** Asks for a run of `key` at `dueAt` (epoch ms); an earlier pending request wins. */
  async requestFollowUp(key: string, dueAt: number): Promise<void> {
    await this.redis.zadd(this.keys.followUps, 'LT', dueAt, key);
  }

  /** Claims up to `limit` due follow-ups for `leaseMs`; also says when the next one falls due. */
  async claimDueFollowUps(opts: {
    now: number;
    limit: number;
    leaseUntil: number;
  }): Promise<{ keys: string[]; nextDueAt?: number }> {
    const reply = await CLAIM_DUE.run(
      this.redis,
      [this.keys.followUps],
      [opts.now, opts.limit, opts.leaseUntil],
    );
    const [keys, next] = z.tuple([z.array(z.string()), z.string()]).parse(reply);
    return next === '' ? { keys } : { keys, nextDueAt: Number(next) };
  }

  async releaseFollowUps(keys: string[], leaseUntil: number): Promise<void> {
    if (keys.length > 0) await RELEASE_CLAIMED.run(this.redis, [this.keys.followUps], [leaseUntil, ...keys]);
  }

  /**
   * Called when a run of `key` starts: that run satisfies every follow-up requested before it,
   * so the pending one is dropped. Resolves to the failure record of earlier runs, if any.
   *
   * The runs that start in one turn of the event loop share one Redis call (with 50 keys at once
   * per process, a call per run was a sixth of a worker's CPU). A run must await this before it
   * requests a follow-up of its own, or the drop could remove it.
   */
  beginRun(key: string): Promise<FailureRecord | undefined> {
    return new Promise((resolve, reject) => {
      this.pendingBegins.push({ key, resolve, reject });
      if (this.pendingBegins.length >= BEGIN_BATCH_MAX) this.flushBegins();
      else if (this.pendingBegins.length === 1) setImmediate(() => this.flushBegins());
    });
  }

  private flushBegins(): void {
    const batch = this.pendingBegins.splice(0);
    if (batch.length === 0) return;
    const keys = batch.map((begin) => begin.key);
    BEGIN_RUNS.run(this.redis, [this.keys.followUps, this.keys.failures], keys).then(
      (reply) => {
        const failures = z.array(z.string().nullable()).length(batch.length).parse(reply);
        batch.forEach((begin, i) => begin.resolve(parseFailure(failures[i])));
      },
      (err: unknown) => batch.forEach((begin) => begin.reject(err)),
    );
  }

  /** Stores a failure and, unless it is terminal, the retry time, in one round trip. */
  async recordFailure(key: string, record: FailureRecord, retryAt?: number): Promise<void> {
    const pipeline = this.redis.pipeline().hset(this.keys.failures, key, JSON.stringify(record));
    if (retryAt !== undefined) pipeline.zadd(this.keys.followUps, 'LT', retryAt, key);
    const replies = (await pipeline.exec()) ?? [];
    const failed = replies.find(([err]) => err);
    if (failed) throw failed[0];
  }

  async clearFailure(key: string): Promise<void> {
    await this.redis.hdel(this.keys.failures, key);
  }

  async failure(key: string): Promise<FailureRecord | undefined> {
    return parseFailure(await this.redis.hget(this.keys.failures, key));
  }

  async failures(): Promise<Map<string, FailureRecord>> {
    return failuresFrom(await this.redis.hgetall(this.keys.failures));
  }

  async followUpCount(): Promise<number> {
    return this.redis.zcard(this.keys.followUps);
  }
}

/** Failure records from an HGETALL of `keys.failures`. */
export function failuresFrom(hash: Record<string, string>): Map<string, FailureRecord> {
  const records = new Map<string, FailureRecord>();
  for (const [key, json] of Object.entries(hash)) {
    const record = parseFailure(json);
    if (record) records.set(key, record);
  }
  return records;
}

/** Pending follow-ups (key → due time, epoch ms) from a ZRANGE WITHSCORES of `keys.followUps`. */
export function followUpsFrom(flat: string[]): Map<string, number> {
  const due = new Map<string, number>();
  for (let i = 0; i + 1 < flat.length; i += 2) due.set(flat[i]!, Number(flat[i + 1]));
  return due;
}

function parseFailure(json: unknown): FailureRecord | undefined {
  if (typeof json !== 'string') return undefined;
  try {
    const parsed = FailureRecordSchema.safeParse(JSON.parse(json));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
