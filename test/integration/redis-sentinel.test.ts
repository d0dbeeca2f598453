// vmop's Redis clients behind Sentinel (issue 27 §1), with the chart's ACL users on every server:
// the managers' client and a BullMQ queue with its worker, and a runner's publisher, find the
// master through password-protected Sentinels and follow it when it is killed.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { snapshotRedisKey, type RunnerSnapshot } from '../../src/api/runner-snapshot.js';
import { REDIS_USERS } from '../../src/devenv/redis-acl.js';
import { startSentinelSet, type SentinelSet } from '../../src/devenv/redis-sentinel.js';
import { snapshotReader } from '../../src/operator/snapshots.js';
import { tenantCredentials } from '../../src/operator/tenant-credentials.js';
import { KeyQueue } from '../../src/queue/producer.js';
import { assertRedisReachable, bullConnection, openRedis } from '../../src/queue/connection.js';
import { redisPublisher } from '../../src/runner/publish.js';
import { createLogger } from '../../src/util/logger.js';
import { eventually } from '../support/eventually.js';

const VMOP = fileURLToPath(new URL('../../bin/vmop', import.meta.url));
const run = promisify(execFile);

const PASSWORDS = {
  manager: 'manager-secret',
  runner: 'runner-secret',
  replication: 'replication-secret',
  sentinel: 'sentinel-user-secret',
};

describe('Redis through Sentinel', () => {
  let set: SentinelSet;
  beforeEach(async () => {
    set = await startSentinelSet({ passwords: PASSWORDS, sentinelPassword: 'sentinels-secret' });
  }, 60_000);
  afterEach(async () => {
    await set?.stop();
  });
  const port = async (redis: ReturnType<typeof openRedis>) => Number((await redis.config('GET', 'port'))[1]);
  /** A snapshot whose cpus is its seq. */
  const snapshot = (seq: number): RunnerSnapshot => ({
    seq,
    runId: 'run-1',
    phase: 'running',
    cpus: seq,
    ram: 1 << 28,
    drives: {},
    booted: true,
    updatedAt: new Date().toISOString(),
  });
  /**
   * A runner's publisher for `vmKey` with its namespace's ACL user, made by the managers' client
   * (which makes it again on a promoted master: ACL users are not replicated), and its reader.
   */
  const runnerAndReader = async (vmKey: string) => {
    const logger = createLogger('sentinel-test');
    logger.level = 'error';
    const manager = openRedis(set.url);
    manager.on('error', () => undefined);
    const credentials = tenantCredentials({
      redis: manager,
      runnerRedisUrl: set.withUser(REDIS_USERS.runner, PASSWORDS.runner),
      knownNamespaces: () => ['team-a'],
      keysOf: () => ({ runner: [snapshotRedisKey(vmKey)], importer: [] }),
      logger,
    });
    const publisher = redisPublisher({
      redisUrl: (await credentials.forNamespace('team-a')).runner,
      vmKey,
      logger,
    });
    return { publisher, manager, readSnapshot: snapshotReader(manager, logger) };
  };

  it("the managers' client and a BullMQ queue reach the master through the Sentinels and follow it when it is SIGKILLed", async () => {
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
      const [master] = set.servers;
      expect(await port(redis)).toBe(master!.port);
      expect(await redis.call('ACL', 'WHOAMI')).toBe(REDIS_USERS.manager);
      await redis.set('written-before', 'kept');
      // Replication is asynchronous: what the replicas acknowledged survives the master.
      expect(await redis.call('WAIT', '2', '5000')).toBe(2);
      await queue.add('before', {});
      await eventually(() => expect(processed).toEqual(['before']));

      master!.kill('SIGKILL');
      // Writes resume once a replica is promoted and has a replica of its own again
      // (min-replicas-to-write 1 refuses them until then).
      await eventually(() => redis.set('written-after', 'yes'), 60_000, 250);
      expect(await port(redis)).not.toBe(master!.port);
      expect(await redis.get('written-before')).toBe('kept');
      await queue.add('after', {});
      await eventually(() => expect(processed).toEqual(['before', 'after']), 60_000);
    } finally {
      await worker.close();
      await queue.close();
      redis.disconnect();
    }
  }, 120_000);

  it('the clients and a BullMQ worker leave a master that hangs (frozen, its connections open) for the promoted replica', async () => {
    const redis = openRedis(set.url);
    redis.on('error', () => undefined); // the failover's connection errors, expected: it reconnects
    const connection = bullConnection(set.url);
    const queue = new Queue('frozen', { connection });
    const processed: string[] = [];
    const worker = new Worker('frozen', async (job) => void processed.push(job.name), { connection });
    queue.on('error', () => undefined);
    worker.on('error', () => undefined);
    const sentinel = new Redis({ port: set.sentinels[0]!.port, password: 'sentinels-secret' });
    const [master] = set.servers;
    try {
      await queue.add('before', {});
      await eventually(() => expect(processed).toEqual(['before']));
      expect(await redis.call('WAIT', '2', '5000')).toBe(2);
      // Frozen, the old master neither answers nor closes a connection: nothing in the clients'
      // own connections tells them to move (a cut-off master looks the same to them).
      master!.kill('SIGSTOP');
      await eventually(async () => {
        const [, masterPort] = (await sentinel.call(
          'SENTINEL',
          'get-master-addr-by-name',
          'vmop',
        )) as string[];
        expect(Number(masterPort)).not.toBe(master!.port);
      }, 60_000);
      // Still frozen: the clients write to the promoted replica without waiting for the old one to go.
      await eventually(() => redis.set('written-after', 'yes'), 60_000, 250);
      expect(await port(redis)).not.toBe(master!.port);
      await queue.add('after', {});
      await eventually(() => expect(processed).toEqual(['before', 'after']), 60_000);
    } finally {
      master!.kill('SIGKILL');
      sentinel.disconnect();
      await worker.close();
      await queue.close();
      redis.disconnect();
    }
  }, 120_000);

  it("a runner's publisher, with its namespace's ACL user, publishes to the master before and after a failover", async () => {
    const vmKey = 'vm:team-a/web';
    const { publisher, manager, readSnapshot } = await runnerAndReader(vmKey);
    try {
      publisher.publish(snapshot(1), { event: 'RUNNER_RESUMED' });
      await eventually(async () => expect(await readSnapshot(vmKey)).toMatchObject({ seq: 1 }));

      const [master] = set.servers;
      master!.kill('SIGKILL');
      // The managers' client makes the namespace's user on the promoted master; the runner logs in again.
      await eventually(
        async () => {
          publisher.publish(snapshot(2), { event: 'RUNNER_RESUMED' });
          expect(await readSnapshot(vmKey)).toMatchObject({ seq: 2, cpus: 2 });
        },
        60_000,
        500,
      );
      expect(await port(manager)).not.toBe(master!.port);
    } finally {
      await publisher.close();
      manager.disconnect();
    }
  }, 120_000);

  it("a runner's snapshot the master refused (no replica in reach: NOREPLICAS) is sent again once it takes writes", async () => {
    const vmKey = 'vm:team-a/refused';
    const { publisher, manager, readSnapshot } = await runnerAndReader(vmKey);
    const replicas = set.servers.slice(1);
    try {
      // Frozen replicas stop acknowledging; past min-replicas-max-lag the master refuses writes,
      // as a master just promoted does until a replica follows it.
      for (const replica of replicas) replica.kill('SIGSTOP');
      await eventually(async () => {
        await expect(manager.set('probe', 'x')).rejects.toThrow(/NOREPLICAS/);
      }, 30_000);
      publisher.publish(snapshot(7), { event: 'RUNNER_RESUMED' });
      await sleep(1000); // refused at least once meanwhile
      expect(await readSnapshot(vmKey)).toBeUndefined();
      for (const replica of replicas) replica.kill('SIGCONT');
      await eventually(async () => expect(await readSnapshot(vmKey)).toMatchObject({ seq: 7 }), 30_000);
    } finally {
      for (const replica of replicas) replica.kill('SIGCONT');
      await publisher.close();
      manager.disconnect();
    }
  }, 120_000);

  it('`vmop queue` reads the queue through the Sentinels, also after a failover', async () => {
    const quiet = createLogger('sentinel-test');
    quiet.level = 'error'; // the failover's reconnects, expected
    const keys = new KeyQueue({ redisUrl: set.url }, { logger: quiet });
    const listed = async () => {
      const { stdout } = await run(VMOP, ['queue', 'ls', '-o', 'json'], {
        env: { ...process.env, REDIS_URL: set.url, VMOP_LOG_LEVEL: 'warn' },
      });
      return (JSON.parse(stdout) as Array<{ key: string; state: string }>).map((row) => row.key);
    };
    try {
      await keys.add('vm:team-a/queued');
      expect(await keys.redis.call('WAIT', '2', '5000')).toBe(2);
      expect(await listed()).toEqual(['vm:team-a/queued']);
      set.servers[0]!.kill('SIGKILL');
      await eventually(async () => expect(await listed()).toEqual(['vm:team-a/queued']), 60_000, 500);
    } finally {
      await keys.close();
    }
  }, 120_000);

  it('refuses a wrong Sentinel password, naming the Sentinels and no password', async () => {
    const wrong = set.url.replace('sentinels-secret', 'guessed');
    const refused = assertRedisReachable(wrong, 2000);
    await expect(refused).rejects.toThrow(/^cannot reach Redis at vmop of Sentinels 127\.0\.0\.1:\d+/);
    await expect(refused).rejects.not.toThrow(/guessed|secret/);
  });
});
