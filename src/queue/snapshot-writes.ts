// How a change a runner (or importer) saw becomes work: it SETs its snapshot key, one of the few
// keys its credential may write (api/tenant-redis.ts), and Redis tells the managers through a
// keyspace notification, which names the key Redis wrote, not what the writer claims. Each manager
// subscribes to exactly the keys of the pods vmop made (operator/tenant-keys.ts) and enqueues the
// VM (or image) a written key reports on. A key written faster than any runner writes (a tenant's
// flood) is unsubscribed for a while, so the flood costs the managers nothing meanwhile, and then
// reconciled once: its namespace waits, the others do not. Notifications are not kept for a
// manager that is away: one that reconnects reconciles every VM and image, as at a resync.
import type { Redis } from 'ioredis';
import { workKeyOfSnapshotKey } from '../api/runner-snapshot.js';
import { workKeyNamespace } from '../api/tenant-redis.js';
import type { Logger } from '../util/logger.js';

/** What the managers need of `notify-keyspace-events`: keyspace channels (K) of string commands ($). */
const NEEDED = ['K', '$'];

/** `flags` with what the managers need added (`A` holds `$`); unchanged if it has it. Pure. */
export function withSnapshotNotifications(flags: string): string {
  const missing = NEEDED.filter((flag) => !flags.includes(flag) && !(flag === '$' && flags.includes('A')));
  return flags + missing.join('');
}

/**
 * Turns on the notifications the managers follow, if Redis has them off (the chart's Redis and
 * `vmop dev` start with them on; another Redis may not).
 */
export async function ensureSnapshotNotifications(redis: Redis): Promise<void> {
  const [, flags] = (await redis.config('GET', 'notify-keyspace-events')) as [string, string];
  const wanted = withSnapshotNotifications(flags ?? '');
  if (wanted !== flags) await redis.config('SET', 'notify-keyspace-events', wanted);
}

/** Writes of one key within a second beyond which it is a flood, and how long it is then not followed. */
export interface FloodBound {
  writesPerSecond: number;
  quietMs: number;
}
/** A runner writes its snapshot 20 times a second at most (runner/publish.ts), the latest each time. */
export const FLOOD_BOUND: FloodBound = { writesPerSecond: 50, quietMs: 2_000 };
const FLOOD_LOG_MS = 60_000;

export interface SnapshotWrites {
  /** Follows the keys `keysOf(namespace)` gives now (the namespace's pods changed). */
  refresh(namespace: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Enqueues the VM or image of every followed snapshot key written. `subscriber` is its own
 * connection (it is in subscribe mode); `redis` another, which turns the notifications on after
 * each reconnect.
 */
export function followSnapshotWrites(options: {
  subscriber: Redis;
  redis: Redis;
  /** The Redis keys of a namespace to follow. */
  keysOf: (namespace: string) => string[];
  /** Whether the managers know the object of a work key (their cache has it). */
  known: (key: string) => boolean;
  enqueue: (keys: string[]) => Promise<void>;
  /** Notifications were lost (the connection dropped): reconcile what runners report on. */
  missed: () => Promise<void>;
  /** A key of `namespace` was written in a flood (its writers are to be stopped). */
  flooded?: (namespace: string) => void;
  bound?: FloodBound;
  logger: Logger;
}): SnapshotWrites {
  const { subscriber, logger } = options;
  const bound = options.bound ?? FLOOD_BOUND;
  const prefix = `__keyspace@${subscriber.options.db ?? 0}__:`;
  subscriber.on('error', () => undefined); // ioredis reconnects and resubscribes; 'ready' says so

  /** By namespace: the keys followed, and those of a flood, not followed until their timer. */
  const followed = new Map<string, Set<string>>();
  const quiet = new Map<string, NodeJS.Timeout>();
  const writes = new Map<string, { count: number; since: number }>();
  const floodLoggedAt = new Map<string, number>();
  let stopped = false;

  // Work keys gathered in one tick go as one enqueue.
  let due = new Set<string>();
  const enqueueSoon = (key: string) => {
    if (!options.known(key)) return;
    if (due.size === 0)
      setImmediate(() => {
        const keys = [...due];
        due = new Set();
        options
          .enqueue(keys)
          .catch((err: Error) =>
            logger.warn({ reason: err.message, keys: keys.length }, 'enqueueing what runners wrote failed'),
          );
      });
    due.add(key);
  };
  const reportedOn = (redisKey: string) => {
    const key = workKeyOfSnapshotKey(redisKey);
    if (key) enqueueSoon(key);
  };

  const silence = (redisKey: string) => {
    void subscriber.unsubscribe(prefix + redisKey).catch(() => undefined);
    const namespace = workKeyNamespace(workKeyOfSnapshotKey(redisKey) ?? '') ?? '';
    options.flooded?.(namespace);
    if (Date.now() - (floodLoggedAt.get(namespace) ?? 0) > FLOOD_LOG_MS) {
      floodLoggedAt.set(namespace, Date.now());
      logger.warn(
        { key: redisKey, quietMs: bound.quietMs },
        'a runner key is written in a flood: not followed for a while',
      );
    }
    quiet.set(
      redisKey,
      setTimeout(() => {
        quiet.delete(redisKey);
        writes.delete(redisKey);
        if (stopped || !followed.get(namespace)?.has(redisKey)) return;
        void subscriber.subscribe(prefix + redisKey).then(
          () => reportedOn(redisKey), // what it wrote meanwhile, once
          () => undefined,
        );
      }, bound.quietMs),
    );
  };

  subscriber.on('message', (channel: string, command: string) => {
    if (command !== 'set' || !channel.startsWith(prefix)) return;
    const redisKey = channel.slice(prefix.length);
    if (quiet.has(redisKey)) return; // sent before the unsubscribe took effect
    const now = Date.now();
    const seen = writes.get(redisKey);
    if (!seen || now - seen.since >= 1000) writes.set(redisKey, { count: 1, since: now });
    else if (++seen.count > bound.writesPerSecond) return silence(redisKey);
    reportedOn(redisKey);
  });

  let subscribedBefore = false;
  subscriber.on('ready', () => {
    if (!subscribedBefore) return void (subscribedBefore = true);
    logger.info('snapshot notifications resumed: reconciling what runners report on');
    void ensureSnapshotNotifications(options.redis)
      .then(() => options.missed())
      .catch((err: Error) => logger.warn({ reason: err.message }, 'catching up on snapshot writes failed'));
  });

  return {
    async refresh(namespace) {
      if (stopped) return;
      // A usage history's writes report on nothing.
      const wanted = new Set(options.keysOf(namespace).filter((key) => workKeyOfSnapshotKey(key)));
      const before = followed.get(namespace) ?? new Set<string>();
      const added = [...wanted].filter((key) => !before.has(key));
      const removed = [...before].filter((key) => !wanted.has(key));
      if (wanted.size > 0) followed.set(namespace, wanted);
      else followed.delete(namespace);
      for (const key of removed) {
        clearTimeout(quiet.get(key));
        quiet.delete(key);
        writes.delete(key);
      }
      if (removed.length > 0) await subscriber.unsubscribe(...removed.map((key) => prefix + key));
      if (added.length > 0) {
        await subscriber.subscribe(...added.map((key) => prefix + key));
        // Written before it was followed (a runner quicker than this manager's cache): once.
        for (const key of added) reportedOn(key);
      }
    },
    async stop() {
      stopped = true;
      for (const timer of quiet.values()) clearTimeout(timer);
      subscriber.disconnect();
    },
  };
}
