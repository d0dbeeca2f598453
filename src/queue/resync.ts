import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from '../util/logger.js';
import { RESYNC_JOB_NAME, RESYNC_SCHEDULER_ID } from './keys.js';

/**
 * Creates (or keeps) the cluster-wide resync schedule: one BullMQ job scheduler per queue, so
 * however many replicas call this, one resync job is produced every `everyMs`.
 */
export async function scheduleResync(queue: Queue, everyMs: number): Promise<void> {
  await queue.upsertJobScheduler(
    RESYNC_SCHEDULER_ID,
    { every: everyMs },
    { name: RESYNC_JOB_NAME, data: {}, opts: { removeOnComplete: true, removeOnFail: { count: 10 } } },
  );
}

/** Calls `onReconnect` each time `redis` is ready again after losing its connection. */
export function watchReconnects(redis: Redis, onReconnect: () => void): () => void {
  let connectedBefore = redis.status === 'ready';
  const onReady = () => {
    if (connectedBefore) onReconnect();
    connectedBefore = true;
  };
  redis.on('ready', onReady);
  return () => redis.off('ready', onReady);
}

/**
 * After a reconnect the Redis may be a fresh one (no persistence): queued keys and the schedule
 * are gone, so the schedule is recreated and this replica resyncs at once.
 */
export function resyncAfterReconnects(opts: {
  redis: Redis;
  queue: Queue;
  everyMs: number;
  onResync: () => Promise<void>;
  logger: Logger;
}): { stop(): Promise<void> } {
  const { redis, queue, everyMs, onResync, logger } = opts;
  const running = new Set<Promise<void>>();
  const stopWatching = watchReconnects(redis, () => {
    logger.info('Redis connection is back: recreating the resync schedule and resyncing');
    const resync = (async () => {
      try {
        await scheduleResync(queue, everyMs);
        await onResync();
      } catch (err) {
        logger.error({ err }, 'resync after reconnect failed; the periodic resync will retry');
      }
    })();
    running.add(resync);
    void resync.finally(() => running.delete(resync));
  });
  return {
    async stop() {
      stopWatching();
      await Promise.all(running);
    },
  };
}
