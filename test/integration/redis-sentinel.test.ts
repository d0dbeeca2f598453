// vmop's Redis clients behind Sentinel (issue 27 §1): a plain client and a BullMQ queue with its
// worker find the master through password-protected Sentinels and follow it when it is killed.
import { Queue, Worker } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSentinelSet, type SentinelSet } from '../../src/devenv/redis-sentinel.js';
import { assertRedisReachable, bullConnection, openRedis } from '../../src/queue/connection.js';
import { eventually } from '../support/eventually.js';

describe('Redis through Sentinel', () => {
  let set: SentinelSet;
  beforeAll(async () => {
    set = await startSentinelSet({ password: 'redis-secret', sentinelPassword: 'sentinel-secret' });
  }, 60_000);
  afterAll(async () => {
    await set?.stop();
  });

  it('a client and a BullMQ queue reach the master through the Sentinels and follow it when it is SIGKILLed', async () => {
    const redis = openRedis(set.url);
    redis.on('error', () => undefined); // the failover's connection errors, expected: it reconnects
    const connection = bullConnection(set.url);
    const queue = new Queue('failover', { connection });
    const processed: string[] = [];
    const worker = new Worker('failover', async (job) => void processed.push(job.name), { connection });
    // The same errors, in BullMQ's connections.
    queue.on('error', () => undefined);
    worker.on('error', () => undefined);
    try {
      const port = async () => Number((await redis.config('GET', 'port'))[1]);
      const [master] = set.servers;
      expect(await port()).toBe(master!.port);
      await redis.set('written-before', 'kept');
      // Replication is asynchronous: what the replicas acknowledged survives the master.
      expect(await redis.call('WAIT', '2', '5000')).toBe(2);
      await queue.add('before', {});
      await eventually(() => expect(processed).toEqual(['before']));

      process.kill(master!.pid, 'SIGKILL');
      // Writes resume once a replica is promoted and has a replica of its own again
      // (min-replicas-to-write 1 refuses them until then).
      await eventually(() => redis.set('written-after', 'yes'), 60_000, 250);
      expect(await port()).not.toBe(master!.port);
      expect(await redis.get('written-before')).toBe('kept');
      await queue.add('after', {});
      await eventually(() => expect(processed).toEqual(['before', 'after']), 60_000);
    } finally {
      await worker.close();
      await queue.close();
      redis.disconnect();
    }
  }, 120_000);

  it('refuses a wrong Sentinel password, naming the Sentinels and no password', async () => {
    const wrong = set.url.replace('sentinel-secret', 'guessed');
    const refused = assertRedisReachable(wrong, 2000);
    await expect(refused).rejects.toThrow(/^cannot reach Redis at vmop of Sentinels 127\.0\.0\.1:\d+/);
    await expect(refused).rejects.not.toThrow(/guessed|secret/);
  });
});
