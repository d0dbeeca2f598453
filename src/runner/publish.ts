import { setTimeout as sleep } from 'node:timers/promises';
import { snapshotRedisKey, type RunnerSnapshot } from '../api/runner-snapshot.js';
import { isAuthError, openRedis, redisWhere } from '../queue/connection.js';
import type { Logger } from '../util/logger.js';
import type { VmEvent } from './qmp/events.js';
import type { PublishSnapshot } from './snapshot/store.js';
import {
  parseUsageHistory,
  usageHistoryKey,
  withSample,
  type UsageRecord,
  type VmUsageSample,
} from '../api/vm-usage-history.js';

export interface SnapshotPublisher {
  publish: PublishSnapshot;
  /** Keeps a sample of what the VM uses in its last hour's history (the GUI's VM page); best effort. */
  recordUsage(record: UsageRecord): void;
  /** Sends what is still pending (waiting at most a few seconds) and closes connections. */
  close(): Promise<void>;
}

/** Stand-alone: every change is logged. */
export function logPublisher(logger: Logger): SnapshotPublisher {
  return {
    publish: (snapshot, event) => logger.info({ snapshot, event: event.event }, 'VM state changed'),
    recordUsage: () => {},
    close: async () => {},
  };
}

const CLOSE_FLUSH_MS = 5_000;
/** At most 20 snapshots a second (queue/snapshot-writes.ts: over 50 is a flood). */
const MIN_GAP_MS = 50;
const RETRY_FIRST_MS = 200;
const RETRY_MAX_MS = 5_000;

/**
 * In a pod: each change is stored as `vmop:snapshot:<vmKey>` (one SET of the whole snapshot),
 * which tells the managers (queue/snapshot-writes.ts), so a reconciler folds the snapshot into the
 * status. While Redis is slow or away, changes coalesce: the latest snapshot is sent next, the
 * ones in between are skipped, as the reconciler only needs the latest state.
 */
export function redisPublisher(options: {
  redisUrl: string;
  vmKey: string;
  /** A migration target's: its snapshot goes to `<key>@<pod>` (snapshotRedisKey). */
  snapshotSuffix?: string;
  logger: Logger;
}): SnapshotPublisher {
  const { vmKey, logger } = options;
  const redis = openRedis(options.redisUrl);
  redis.on('error', (err: Error) => logger.warn({ reason: err.message }, 'Redis connection problem'));
  let next: { snapshot: RunnerSnapshot; event: VmEvent } | undefined;
  let latest: RunnerSnapshot | undefined;
  let sending: Promise<void> | undefined;

  let closed = false;

  const send = async () => {
    let retryMs = RETRY_FIRST_MS;
    while (next && !closed) {
      const { snapshot, event } = next;
      next = undefined;
      try {
        await redis.set(snapshotRedisKey(vmKey, options.snapshotSuffix), JSON.stringify(snapshot));
        logger.debug({ seq: snapshot.seq, event: event.event }, 'snapshot published');
        retryMs = RETRY_FIRST_MS;
        // A burst of changes (a CPU hot-plug's events) goes as a few snapshots, the latest each:
        // the managers take a key written faster than a runner does for a flood.
        if (next) await sleep(MIN_GAP_MS);
      } catch (err) {
        // Refused, not lost in a dropped connection (ioredis resends those): e.g. a master just
        // promoted refuses writes (NOREPLICAS) until a replica follows it. Sent again, unless a
        // newer change came meanwhile: no change a runner saw may stay unreported.
        logger.warn(
          { seq: snapshot.seq, reason: (err as Error).message },
          'publishing the snapshot failed; retrying',
        );
        next ??= { snapshot, event };
        if (isAuthError(err)) redis.disconnect(true);
        await sleep(retryMs);
        retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
      }
    }
    sending = undefined;
  };

  const publish: PublishSnapshot = (snapshot, event) => {
    latest = snapshot;
    next = { snapshot, event };
    sending ??= send();
  };
  // A Redis that comes back may have come back empty (restarted without persistence, failed
  // over): the whole snapshot goes again after every reconnect, or the VM would look unreported.
  let connectedBefore = false;
  let history: VmUsageSample[] | undefined;
  let recording = Promise.resolve();
  redis.on('ready', () => {
    if (connectedBefore && latest) {
      logger.info({ seq: latest.seq }, 'Redis reconnected: publishing the snapshot again');
      publish(latest, { event: 'RUNNER_RECONNECTED' });
    }
    connectedBefore = true;
  });

  logger.info({ redis: redisWhere(options.redisUrl), vmKey }, 'publishing VM state to Redis');
  return {
    publish,
    recordUsage(record) {
      if (closed) return;
      const sample = { t: Date.now(), record };
      recording = recording
        .then(async () => {
          // The hour a runner before this one (a migration's source, or before a restart) recorded.
          history ??= parseUsageHistory(await redis.get(usageHistoryKey(vmKey)));
          history = withSample(history, sample);
          await redis.set(usageHistoryKey(vmKey), JSON.stringify(history));
        })
        .catch((err: unknown) =>
          logger.debug({ reason: (err as Error).message }, 'recording the usage failed'),
        );
    },
    async close() {
      // The last usage sample too: it was lost when the disconnect came between its read and write.
      const flushed = await Promise.race([
        Promise.all([sending ?? Promise.resolve(), recording]).then(() => true),
        sleep(CLOSE_FLUSH_MS, false),
      ]);
      if (!flushed) logger.warn('Redis did not take the last snapshot and usage sample in time');
      closed = true;
      redis.disconnect();
    },
  };
}
