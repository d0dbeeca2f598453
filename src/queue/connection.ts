import { Redis } from 'ioredis';
import { z } from 'zod';

export const RedisUrlSchema = z
  .string()
  .regex(/^rediss?:\/\/\S+$/, 'a Redis URL looks like redis://host:port');

/**
 * Connection options for BullMQ objects. `maxRetriesPerRequest: null` keeps commands queued
 * across a Redis restart instead of failing them, which workers need.
 */
export function bullConnection(redisUrl: string) {
  return { url: redisUrl, maxRetriesPerRequest: null };
}

/** A plain client for vmop's own keys, with the same retry behaviour as BullMQ's connections. */
export function openRedis(redisUrl: string): Redis {
  return new Redis(redisUrl, { maxRetriesPerRequest: null });
}

/**
 * Fails fast when nothing answers at `redisUrl`: the clients above wait for Redis indefinitely,
 * which a worker wants but a command-line user does not.
 */
export async function assertRedisReachable(redisUrl: string, timeoutMs = 3000): Promise<void> {
  const probe = new Redis(redisUrl, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  let cause: unknown;
  probe.on('error', (err) => (cause = err));
  try {
    await probe.connect();
    await probe.ping();
  } catch (err) {
    const reason = cause ?? err;
    // The host only: the URL may carry a password.
    const where = new URL(redisUrl).host;
    throw new Error(
      `cannot reach Redis at ${where}: ${reason instanceof Error ? reason.message : String(reason)}`,
    );
  } finally {
    probe.disconnect();
  }
}
