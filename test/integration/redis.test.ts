import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startRedis, type RedisServer } from '../../src/devenv/redis.js';
import { isRunning } from '../../src/util/process.js';

describe('test Redis', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('round-trips a value on its own loopback port', async () => {
    expect(server.url).toMatch(/^redis:\/\/127\.0\.0\.1:\d+$/);
    const client = new Redis(server.url);
    try {
      await client.set('greeting', 'hello vmop');
      expect(await client.get('greeting')).toBe('hello vmop');
      expect(await client.config('GET', 'save')).toEqual(['save', '']);
    } finally {
      client.disconnect();
    }
  });

  it('gives each caller a separate server', async () => {
    const other = await startRedis();
    try {
      expect(other.port).not.toBe(server.port);
      const a = new Redis(server.url);
      const b = new Redis(other.url);
      await a.set('owner', 'first');
      expect(await b.get('owner')).toBeNull();
      a.disconnect();
      b.disconnect();
    } finally {
      await other.stop();
    }
  });

  it('stops the process', async () => {
    const temporary = await startRedis();
    await temporary.stop();
    expect(isRunning(temporary.ref)).toBe(false);
  });
});
