// The runner's Redis credential as the Helm chart defines it (helm/vmop/files/runner-acl-rules.txt),
// on a real Redis: a runner can publish its snapshot, enqueue its VM and read the requests sent
// to it, and nothing else.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { snapshotRedisKey, type RunnerSnapshot } from '../../src/api/runner-snapshot.js';
import { startRedis, type RedisServer } from '../../src/devenv/redis.js';
import { redisAclFile, REDIS_USERS } from '../../src/devenv/redis-acl.js';
import { snapshotReader } from '../../src/operator/snapshots.js';
import { DEFAULT_QUEUE_NAME } from '../../src/queue/index.js';
import { redisPublisher } from '../../src/runner/publish.js';
import { createLogger } from '../../src/util/logger.js';
import { runnerRequestKey } from '../../src/api/runner-request.js';
import { runnerRequestSender } from '../../src/operator/runner-requests.js';
import { watchRunnerRequests } from '../../src/runner/migration/request-channel.js';
import type { MigrationRequest } from '../../src/runner/migration/request.js';
import { eventually } from '../support/eventually.js';

const VM_KEY = 'vm:team-a/web';
const PASSWORDS = { manager: 'm-secret', runner: 'r-secret', replication: 'l-secret', sentinel: 's-secret' };

describe("the runner's Redis ACL user", () => {
  let dir: string;
  let server: RedisServer;
  let manager: Redis;
  let runner: Redis;
  const url = (user: string, password: string) => `redis://${user}:${password}@127.0.0.1:${server.port}`;
  /** The error Redis answers the runner's credential with, or 'OK' when it allowed the command. */
  const asRunner = (command: string, ...args: string[]) =>
    runner.call(command, ...args).then(
      () => 'OK',
      (err: Error) => err.message,
    );

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-acl-'));
    const aclFile = path.join(dir, 'users.acl');
    await writeFile(aclFile, await redisAclFile(PASSWORDS));
    server = await startRedis({ extraArgs: ['--aclfile', aclFile] });
    manager = new Redis(url(REDIS_USERS.manager, PASSWORDS.manager));
    runner = new Redis(url(REDIS_USERS.runner, PASSWORDS.runner), { maxRetriesPerRequest: 0 });
  });

  afterAll(async () => {
    manager?.disconnect();
    runner?.disconnect();
    await server?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("publishes a snapshot and enqueues the VM's key, as the runner does", async () => {
    const logger = createLogger('acl-test');
    const publisher = redisPublisher({
      redisUrl: url(REDIS_USERS.runner, PASSWORDS.runner),
      vmKey: VM_KEY,
      logger,
    });
    const snapshot: RunnerSnapshot = {
      seq: 1,
      runId: 'run-1',
      phase: 'booting',
      cpus: 1,
      ram: 1 << 28,
      drives: {},
      booted: false,
      updatedAt: new Date().toISOString(),
    };
    publisher.publish(snapshot, { event: 'RUNNER_RESUMED' });
    await publisher.close();
    // The manager, with its own credential, sees both.
    expect(await snapshotReader(manager, logger)(VM_KEY)).toMatchObject({ seq: 1, runId: 'run-1', cpus: 1 });
    const queue = new Queue(DEFAULT_QUEUE_NAME, { connection: manager.duplicate() });
    try {
      await eventually(async () =>
        expect((await queue.getJobs(['waiting'])).map((job) => job.name)).toContain(VM_KEY),
      );
    } finally {
      await queue.close();
    }
  });

  it('reads the requests the manager sends to its pod, the one already there first, and cannot send one', async () => {
    const send = runnerRequestSender(manager);
    const first: MigrationRequest = { id: 'm1', role: 'source', mirror: [] };
    await send('pod-uid-1', first);
    await send('pod-uid-2', { id: 'other', role: 'source', mirror: [] }); // another pod's
    const received: MigrationRequest[] = [];
    const channel = watchRunnerRequests({
      redis: new Redis(url(REDIS_USERS.runner, PASSWORDS.runner)),
      podUid: 'pod-uid-1',
      logger: createLogger('acl-test'),
      onRequest: (request) => received.push(request),
    });
    try {
      await eventually(() => expect(received).toEqual([first]));
      // Sent right after the first, as an abort follows a start: it comes too.
      await send('pod-uid-1', { ...first, abort: true });
      await eventually(() => expect(received).toEqual([first, { ...first, abort: true }]));
    } finally {
      channel.close();
    }
    // Only the latest request is kept; the runner may read it, not write one.
    expect(await manager.xlen(runnerRequestKey('pod-uid-1'))).toBe(1);
    expect(await asRunner('XREVRANGE', runnerRequestKey('pod-uid-1'), '+', '-', 'COUNT', '1')).toBe('OK');
    expect(await asRunner('XADD', runnerRequestKey('pod-uid-1'), '*', 'request', '{}')).toMatch(/NOPERM/);
    expect(await asRunner('DEL', runnerRequestKey('pod-uid-1'))).toMatch(/NOPERM/);
  });

  it('may touch no other key and run no administrative command', async () => {
    expect(await asRunner('GET', snapshotRedisKey(VM_KEY))).toBe('OK');
    for (const [command, ...args] of [
      ['SET', 'vmop:vmop:failures', 'x'],
      ['GET', 'some-other-app:secret'],
      ['DEL', 'vmop:vmop:follow-ups'],
      ['FLUSHALL'],
      ['CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru'],
      ['ACL', 'SETUSER', REDIS_USERS.runner, '+@all'],
      ['SCRIPT', 'FLUSH'],
      ['FUNCTION', 'LOAD', "#!lua name=x\nredis.register_function('x', function() return 1 end)"],
      ['KEYS', '*'],
      ['CLIENT', 'KILL', 'TYPE', 'normal'],
      ['SHUTDOWN'],
      ['PUBLISH', 'channel', 'message'],
    ]) {
      expect(`${command} ${args.join(' ')}: ${await asRunner(command!, ...args)}`).toMatch(/: NOPERM/);
    }
    // A script runs with the caller's rights: it cannot reach other keys either.
    expect(await asRunner('EVAL', "return redis.call('GET', KEYS[1])", '1', 'some-other-app:secret')).toMatch(
      /NOPERM|permissions/,
    );
  });
});
