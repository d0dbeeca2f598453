// The generation marks on a real Redis: replicas raise them in any order, never lower them, and a
// VM made again under its old name starts afresh.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { generationMarks, type GenerationMarks } from '../../../src/operator/generation-marks.js';

describe('generation marks (real Redis)', () => {
  let server: RedisServer;
  let redis: Redis;
  let marks: GenerationMarks;
  beforeAll(async () => {
    server = await startRedis();
    redis = new Redis(server.url);
    marks = generationMarks(redis);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it('keeps the newest generation any replica saw, per VM incarnation', async () => {
    expect(await marks.newest('vm:ns/a', 'uid-1')).toBe(0);
    await marks.raise('vm:ns/a', 'uid-1', 3);
    await marks.raise('vm:ns/a', 'uid-1', 2); // a slower replica's watch, later
    expect(await marks.newest('vm:ns/a', 'uid-1')).toBe(3);
    await marks.raise('vm:ns/a', 'uid-1', 4);
    expect(await marks.newest('vm:ns/a', 'uid-1')).toBe(4);
    expect(await marks.newest('vm:ns/a', 'uid-2')).toBe(0); // deleted and made again
    await marks.forget('vm:ns/a', 'uid-1');
    expect(await marks.newest('vm:ns/a', 'uid-1')).toBe(0);
  });
});
