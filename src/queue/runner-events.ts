// How a change a runner (or importer) saw becomes work: the runner adds an entry to its namespace's
// event stream (the only queue-like key its credential may write, api/tenant-redis.ts), and the
// managers, one consumer group, move the entries into the work queue. The streams are written with
// tenants' credentials, so a namespace may flood its own: an entry naming another namespace's key
// or an object the managers do not know is dropped, a batch enqueues each key once (the queue
// would fold them anyway, at a round trip each), and a stream longer than the managers keep is
// trimmed whatever its writer asked, its namespace then reconciled whole. A flood costs its
// namespace, not the others: each round reads every namespace's stream alike.
import type { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  EVENT_FIELD,
  EVENT_KEY_FIELD,
  EVENTS_MAX_LENGTH,
  runnerEventsKey,
  workKeyNamespace,
} from '../api/tenant-redis.js';
import type { Logger } from '../util/logger.js';

/** Tells the managers that `key` changed, and why (`event`, kept for inspection). */
export async function sendRunnerEvent(redis: Redis, key: string, event: unknown): Promise<void> {
  const namespace = workKeyNamespace(key);
  if (!namespace) throw new Error(`${key} names no namespace`);
  await redis.xadd(
    runnerEventsKey(namespace),
    'MAXLEN',
    '~',
    String(EVENTS_MAX_LENGTH),
    '*',
    EVENT_KEY_FIELD,
    key,
    EVENT_FIELD,
    JSON.stringify(event ?? null),
  );
}

/**
 * Redis refused the credential: a Redis that came back without the namespace's user (the managers
 * make it again on reconnecting). ioredis keeps such a connection open, unauthenticated, for good:
 * the caller reconnects to authenticate again.
 */
export const isAuthError = (err: unknown) => /^(NOAUTH|WRONGPASS)/.test((err as Error)?.message ?? '');

const GROUP = 'vmop-managers';
const BLOCK_MS = 1_000;
/** Entries read from each stream per round. */
const BATCH = 1000;
/** How often a namespace's overflow is logged at most. */
const OVERFLOW_LOG_MS = 60_000;
/** An entry a consumer read but did not acknowledge this long (it died) is taken over. */
const CLAIM_IDLE_MS = 30_000;
const RETRY_MS = 1_000;

type Entries = Array<[id: string, fields: string[]]>;
type ReadReply = Array<[stream: string, entries: Entries]> | null;

export interface RunnerEventPump {
  stop(): Promise<void>;
}

/**
 * Moves the event streams' entries of `namespaces()` (read again on each round) into the work
 * queue. `redis` is its own connection: blocking reads hold it.
 */
export function pumpRunnerEvents(options: {
  redis: Redis;
  namespaces: () => Iterable<string>;
  enqueue: (key: string, event: unknown) => Promise<void>;
  /** Whether the managers know the object of `key` (their cache has it): entries for others are dropped. */
  known: (key: string) => boolean;
  /** A stream overflowed and was trimmed (events were lost): reconcile what its namespace has. */
  overflowed: (namespace: string) => Promise<void>;
  /** This replica's name in the consumer group. */
  consumer: string;
  logger: Logger;
}): RunnerEventPump {
  const { redis, logger } = options;
  redis.on('error', () => undefined); // the loop says when reading fails
  let stopped = false;
  let grouped = new Set<string>();
  redis.on('ready', () => (grouped = new Set())); // a Redis that came back may have lost them
  let claimedAt = Date.now();

  const ensureGroup = async (stream: string) => {
    if (grouped.has(stream)) return;
    await redis.xgroup('CREATE', stream, GROUP, '0', 'MKSTREAM').catch((err: Error) => {
      if (!err.message.startsWith('BUSYGROUP')) throw err;
    });
    grouped.add(stream);
  };

  const overflowLoggedAt = new Map<string, number>();
  const handle = async (stream: string, entries: Entries) => {
    const namespace = namespaceOf(stream);
    // Each key once, with its latest event.
    const latest = new Map<string, unknown>();
    let dropped = 0;
    for (const [, fields] of entries) {
      const entry = fieldsOf(fields);
      const key = entry[EVENT_KEY_FIELD];
      if (key && workKeyNamespace(key) === namespace && options.known(key))
        latest.set(key, entry[EVENT_FIELD]);
      else dropped++;
    }
    if (dropped > 0)
      logger.warn({ stream, dropped }, "dropped runner events for keys the stream's namespace does not have");
    for (const [key, event] of latest) await options.enqueue(key, parseEvent(event as string | undefined));
    const ids = entries.map(([id]) => id);
    if (ids.length > 0)
      await redis
        .multi()
        .xack(stream, GROUP, ...ids)
        .xdel(stream, ...ids)
        .exec();
  };

  /** Trims a stream its writers let grow past what is kept; its namespace is reconciled whole. */
  const trim = async (stream: string) => {
    const trimmed = await redis.xtrim(stream, 'MAXLEN', EVENTS_MAX_LENGTH);
    if (trimmed === 0) return;
    const namespace = namespaceOf(stream);
    if (Date.now() - (overflowLoggedAt.get(namespace) ?? 0) > OVERFLOW_LOG_MS) {
      overflowLoggedAt.set(namespace, Date.now());
      logger.warn({ stream, trimmed }, "a namespace's runner events overflowed: dropped, its VMs reconciled");
    }
    await options.overflowed(namespace);
  };

  const round = async () => {
    const streams = [...new Set(options.namespaces())].sort().map(runnerEventsKey);
    if (streams.length === 0) return sleep(BLOCK_MS);
    for (const stream of streams) await ensureGroup(stream);
    if (Date.now() - claimedAt > CLAIM_IDLE_MS) {
      claimedAt = Date.now();
      for (const stream of streams) {
        const [, claimed] = (await redis.xautoclaim(
          stream,
          GROUP,
          options.consumer,
          CLAIM_IDLE_MS,
          '0-0',
          'COUNT',
          BATCH,
        )) as [string, Entries];
        await handle(
          stream,
          claimed.filter(([, fields]) => fields),
        );
      }
    }
    const reply = (await redis.xreadgroup(
      'GROUP',
      GROUP,
      options.consumer,
      'COUNT',
      BATCH,
      'BLOCK',
      BLOCK_MS,
      'STREAMS',
      ...streams,
      ...streams.map(() => '>'),
    )) as ReadReply;
    for (const [stream, entries] of reply ?? []) {
      await handle(stream, entries);
      if (entries.length === BATCH) await trim(stream);
    }
  };

  const loop = (async () => {
    while (!stopped) {
      try {
        await round();
      } catch (err) {
        if (stopped) return;
        if ((err as Error).message.startsWith('NOGROUP')) grouped = new Set();
        // The namespaces named, so that a suite's failure report (lines about its namespace) shows it.
        else
          logger.warn(
            {
              reason: (err as Error).message,
              namespaces: [...new Set(options.namespaces())],
            },
            'reading runner events failed; retrying',
          );
        await sleep(RETRY_MS);
      }
    }
  })();

  return {
    async stop() {
      stopped = true;
      redis.disconnect();
      await loop;
    },
  };
}

/** The namespace whose runner events `stream` holds. */
const namespaceOf = (stream: string) => stream.slice(runnerEventsKey('').length);

function fieldsOf(fields: string[]): Record<string, string> {
  const entry: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) entry[fields[i]!] = fields[i + 1]!;
  return entry;
}

function parseEvent(text: string | undefined): unknown {
  try {
    return text === undefined ? undefined : JSON.parse(text);
  } catch {
    return undefined;
  }
}
