// One assignment at a time per pool, across manager replicas: a lock in the Redis they share.
// The apiserver alone keeps two users off one VM (the status write is guarded by the VM's
// resourceVersion); the lock also keeps one user's two requests at once (two tabs) from getting two.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';

export interface PoolLock {
  /** Runs `work` holding the lock named `name`; waits for it at most `waitMs`. */
  withLock<T>(name: string, work: () => Promise<T>): Promise<T>;
}

const RELEASE =
  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

export function redisPoolLock(
  redis: Redis,
  { holdMs = 15_000, waitMs = 15_000, pollMs = 20 } = {},
): PoolLock {
  return {
    async withLock(name, work) {
      const key = `vmop:lock:${name}`;
      const token = randomUUID();
      // Held at most holdMs: a replica that dies holding it delays the pool, it does not block it.
      for (let waited = 0; (await redis.set(key, token, 'PX', holdMs, 'NX')) !== 'OK'; waited += pollMs) {
        if (waited >= waitMs)
          throw new Error(`${name} is busy: another assignment did not finish within ${waitMs} ms`);
        await sleep(pollMs);
      }
      try {
        return await work();
      } finally {
        await redis.eval(RELEASE, 1, key, token);
      }
    },
  };
}
