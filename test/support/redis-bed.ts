// A private Redis and a client of it for one test file: made before its tests, gone after.
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { startRedis, type RedisServer } from '../../src/devenv/redis.js';

export interface RedisBed {
  server: RedisServer;
  redis: Redis;
}

/** Registers the hooks; the bed's fields are there once the file's beforeAll hooks ran. */
export function redisBed(): RedisBed {
  const bed = {} as RedisBed;
  beforeAll(async () => {
    bed.server = await startRedis();
    bed.redis = new Redis(bed.server.url);
  });
  afterAll(async () => {
    bed.redis?.disconnect();
    await bed.server?.stop();
  });
  return bed;
}
