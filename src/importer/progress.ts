// An import's progress, sent to the manager through Redis (as a runner sends its snapshots): the
// latest progress under the disk's key, whose write tells the managers (queue/snapshot-writes.ts).
// Sent at most once a second; what happens in between is skipped.
import { importProgressRedisKey, type ImportProgress } from '../api/import-progress.js';
import { isAuthError, openRedis } from '../queue/connection.js';
import type { Logger } from '../util/logger.js';

const INTERVAL_MS = 1000;
/** Progress is of no use after a day; nothing else removes it. */
const KEEP_SECONDS = 24 * 3600;

export interface ProgressSender {
  send(progress: Omit<ImportProgress, 'podUid'>): void;
  /** Sends the latest progress now and closes the connections. */
  close(): Promise<void>;
}

export function redisProgress(options: {
  redisUrl: string;
  vmKey: string;
  volume: string;
  podUid: string;
  logger: Logger;
}): ProgressSender {
  const redis = openRedis(options.redisUrl);
  redis.on('error', (err: Error) => options.logger.warn({ reason: err.message }, 'Redis connection problem'));
  const key = importProgressRedisKey(options.vmKey, options.volume);
  let latest: ImportProgress | undefined;
  let sentAt = 0;
  let sending: Promise<void> = Promise.resolve();
  const flush = () => {
    const progress = latest;
    if (!progress) return sending;
    latest = undefined;
    sentAt = Date.now();
    sending = sending
      .then(async () => void (await redis.set(key, JSON.stringify(progress), 'EX', KEEP_SECONDS)))
      .catch((err: unknown) => {
        options.logger.warn({ reason: (err as Error).message }, 'sending the import progress failed');
        if (isAuthError(err)) redis.disconnect(true);
      });
    return sending;
  };
  let timer: NodeJS.Timeout | undefined;
  return {
    send(progress) {
      latest = { ...progress, podUid: options.podUid };
      const dueIn = sentAt + INTERVAL_MS - Date.now();
      if (dueIn <= 0) void flush();
      else
        timer ??= setTimeout(() => {
          timer = undefined;
          void flush();
        }, dueIn);
    },
    async close() {
      clearTimeout(timer);
      await flush();
      await redis.quit().catch(() => undefined);
    },
  };
}
