// Each namespace's runner and importer Redis users, as the managers make them (tenant-credentials.ts),
// on a real Redis with the chart's ACL file and settings (the default user off): a runner publishes
// its VMs' state and reads its pods' requests, can write only the keys of the pods vmop made in its
// namespace, and can reach nothing of another namespace nor the queue. Its writes reach the
// managers as keyspace notifications (queue/snapshot-writes.ts).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { importProgressRedisKey } from '../../src/api/import-progress.js';
import { runnerRequestKey } from '../../src/api/runner-request.js';
import { snapshotRedisKey, type RunnerSnapshot } from '../../src/api/runner-snapshot.js';
import type { V1Pod } from '@kubernetes/client-node';
import type { TenantRedisUrls } from '../../src/api/tenant-redis.js';
import { parseUsageHistory, usageHistoryKey } from '../../src/api/vm-usage-history.js';
import { redisAclFile, REDIS_USERS } from '../../src/devenv/redis-acl.js';
import { REDIS_SETTINGS, startRedis, type RedisServer } from '../../src/devenv/redis.js';
import { runnerRequestSender } from '../../src/operator/runner-requests.js';
import { snapshotReader } from '../../src/operator/snapshots.js';
import { tenantCredentials } from '../../src/operator/tenant-credentials.js';
import { tenantKeysOf } from '../../src/operator/tenant-keys.js';
import { FLOOD_BOUND, followSnapshotWrites, type SnapshotWrites } from '../../src/queue/snapshot-writes.js';
import { redisProgress } from '../../src/importer/progress.js';
import { redisPublisher } from '../../src/runner/publish.js';
import { watchRunnerRequests } from '../../src/runner/migration/request-channel.js';
import type { MigrationRequest } from '../../src/runner/migration/request.js';
import { createLogger } from '../../src/util/logger.js';
import { eventually } from '../support/eventually.js';
import { importerPod, runnerPod } from '../support/vmop-pods.js';

const PASSWORDS = { manager: 'm-secret', runner: 'r-base', replication: 'l-secret', sentinel: 's-secret' };
const logger = createLogger('acl-test');
/** How long a flooding namespace's users are off here (the managers: 10 s). */
const SUSPEND_MS = 3_000;

const snapshot = (seq: number): RunnerSnapshot => ({
  seq,
  runId: 'run-1',
  phase: 'booting',
  cpus: 1,
  ram: 1 << 28,
  drives: {},
  booted: false,
  updatedAt: new Date().toISOString(),
});

describe("each namespace's Redis users", () => {
  let dir: string;
  let aclFile: string;
  let server: RedisServer;
  let manager: Redis;
  let credentials: ReturnType<typeof tenantCredentials>;
  let writes: SnapshotWrites;
  const enqueued: string[] = [];
  /** When each key of `enqueued` was enqueued. */
  const enqueuedAt: number[] = [];
  /** When the snapshot writes stopped following a flooded key. */
  let silencedAt: number | undefined;
  let missed = 0;
  /** The VMs and images the managers' caches have. */
  const KNOWN = new Set(['vm:team-a/web', 'vm:team-b/db', 'image:team-a/debian']);
  /** The pods vmop made, as the managers' caches have them. */
  const pods: V1Pod[] = [
    runnerPod('team-a', 'web', 'web-1'),
    runnerPod('team-b', 'db', 'db-1'),
    importerPod('team-a', { image: 'debian' }, 'image'),
    importerPod('team-a', { vm: 'web' }, 'root'),
  ];
  const urls: Record<string, TenantRedisUrls> = {};
  const clients: Redis[] = [];
  const managerUrl = () => `redis://${REDIS_USERS.manager}:${PASSWORDS.manager}@127.0.0.1:${server.port}`;
  /** The error Redis answers `url`'s credential with, or 'OK' when it allowed the command. */
  const as = (url: string) => {
    const client = new Redis(url, { maxRetriesPerRequest: 0 });
    client.on('error', () => undefined); // the command says what was refused
    clients.push(client);
    return (command: string, ...args: string[]) =>
      client.call(command, ...args).then(
        () => 'OK',
        (err: Error) => err.message,
      );
  };

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-acl-'));
    aclFile = path.join(dir, 'users.acl');
    await writeFile(aclFile, await redisAclFile(PASSWORDS));
    server = await startRedis({ extraArgs: ['--aclfile', aclFile, ...REDIS_SETTINGS] });
    manager = new Redis(managerUrl());
    credentials = tenantCredentials({
      redis: manager,
      runnerRedisUrl: `redis://${REDIS_USERS.runner}:${PASSWORDS.runner}@127.0.0.1:${server.port}`,
      knownNamespaces: () => Object.keys(urls),
      keysOf: (namespace) => tenantKeysOf(namespace, pods),
      logger,
    });
    for (const namespace of ['team-a', 'team-b', 'team'])
      urls[namespace] = await credentials.forNamespace(namespace);
    writes = followSnapshotWrites({
      subscriber: new Redis(managerUrl(), { maxRetriesPerRequest: null }),
      redis: manager,
      keysOf: (namespace) => {
        const keys = tenantKeysOf(namespace, pods);
        return [...keys.runner, ...keys.importer];
      },
      known: (key) => KNOWN.has(key),
      enqueue: async (keys) => {
        enqueued.push(...keys);
        enqueuedAt.push(...keys.map(() => Date.now()));
      },
      missed: async () => void missed++,
      flooded: (namespace) => {
        silencedAt ??= Date.now();
        void credentials.suspend(namespace, SUSPEND_MS);
      },
      logger,
    });
    for (const namespace of ['team-a', 'team-b']) await writes.refresh(namespace);
  });

  afterAll(async () => {
    await writes?.stop();
    for (const client of clients) client.disconnect();
    manager?.disconnect();
    await server?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("publishes a VM's snapshot and usage, and the managers enqueue its key", async () => {
    const publisher = redisPublisher({ redisUrl: urls['team-a']!.runner, vmKey: 'vm:team-a/web', logger });
    publisher.publish(snapshot(1), { event: 'RUNNER_RESUMED' });
    const usage = { cpu: 1.5, resident: 300, diskRead: 0, diskWrite: 7 };
    publisher.recordUsage(usage);
    await publisher.close();
    expect(await snapshotReader(manager, logger)('vm:team-a/web')).toMatchObject({ seq: 1, runId: 'run-1' });
    await eventually(() => expect(enqueued).toContain('vm:team-a/web'));
    expect(parseUsageHistory(await manager.get(usageHistoryKey('vm:team-a/web')))).toEqual([
      { t: expect.any(Number), record: usage },
    ]);
  });

  it("cannot write a key no pod of its namespace has, another namespace's, a stream or the queue", async () => {
    const teamB = as(urls['team-b']!.runner);
    expect(await teamB('SET', snapshotRedisKey('vm:team-b/db'), '{}')).toBe('OK');
    // What she may write, at most 1 MB each (Redis drops the connection sending more).
    // (The error is Redis' 'Protocol error' or the dropped connection's, whichever ioredis sees first.)
    expect(
      await as(urls['team-b']!.runner)('SET', snapshotRedisKey('vm:team-b/db'), 'x'.repeat(2 << 20)),
    ).not.toBe('OK');
    expect(await manager.strlen(snapshotRedisKey('vm:team-b/db'))).toBe(2);
    expect(await teamB('SET', snapshotRedisKey('vm:team-b/db'), 'x'.repeat(512 << 10))).toBe('OK');
    for (const [command, ...args] of [
      // Keys of her own namespace that no pod vmop made has: each would be more memory of hers.
      ['SET', snapshotRedisKey('vm:team-b/pad1'), 'x'],
      ['SET', snapshotRedisKey('vm:team-b/db@pad'), 'x'],
      ['SET', `${snapshotRedisKey('vm:team-b/db')}#import/pad`, 'x'],
      ['XADD', `${snapshotRedisKey('vm:team-b/db')}#usage`, '*', 'cpu', '1'],
      ['APPEND', snapshotRedisKey('vm:team-b/db'), 'x'],
      ['SETRANGE', snapshotRedisKey('vm:team-b/db'), '1000000', 'x'],
      ['XADD', 'vmop:events:team-b', '*', 'key', 'vm:team-b/db'],
      ['SET', snapshotRedisKey('vm:team-a/web'), '{"seq":99}'],
      ['SET', snapshotRedisKey('vm:team-a/web@web-target'), '{}'],
      ['GET', snapshotRedisKey('vm:team-a/web')],
      ['DEL', snapshotRedisKey('vm:team-a/web')],
      ['XADD', 'bull:vmop:wait', '*', 'x', 'y'],
      ['LPUSH', 'bull:vmop:wait', 'x'],
      ['SET', 'vmop:vmop:failures', 'x'],
      ['XREAD', 'STREAMS', runnerRequestKey('team-a', 'pod-1'), '0'],
      ['SCAN', '0'],
      ['KEYS', '*'],
      ['FLUSHALL'],
      ['CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru'],
      ['ACL', 'SETUSER', 'vmop-runner.team-b', '~*'],
      ['EVAL', "return redis.call('GET', KEYS[1])", '1', snapshotRedisKey('vm:team-a/web')],
      ['CLIENT', 'KILL', 'TYPE', 'normal'],
      ['CLIENT', 'TRACKING', 'on', 'BCAST', 'PREFIX', 'vmop:'],
      ['CLIENT', 'LIST'],
      ['PUBLISH', 'channel', 'message'],
      ['PSUBSCRIBE', '__keyspace@0__:*'],
    ]) {
      expect(`${command} ${args.join(' ')}: ${await teamB(command!, ...args)}`).toMatch(/: NOPERM/);
    }
    // `team` is a prefix of `team-b`, not its owner.
    expect(await as(urls['team']!.runner)('SET', snapshotRedisKey('vm:team-b/db'), '{}')).toMatch(/NOPERM/);
    expect(await snapshotReader(manager, logger)('vm:team-a/web')).toMatchObject({ seq: 1 });
  });

  it('may write a key while its pod is there, not before or after', async () => {
    const teamB = as(urls['team-b']!.runner);
    const target = snapshotRedisKey('vm:team-b/db', '@db-2');
    expect(await teamB('SET', target, '{}')).toMatch(/NOPERM/);
    pods.push(runnerPod('team-b', 'db', 'db-2', true));
    await credentials.refresh('team-b');
    await writes.refresh('team-b');
    const before = enqueued.length;
    expect(await teamB('SET', target, '{}')).toBe('OK');
    await eventually(() => expect(enqueued.slice(before)).toContain('vm:team-b/db'));
    pods.pop();
    await credentials.refresh('team-b');
    await writes.refresh('team-b');
    expect(await teamB('SET', target, '{}')).toMatch(/NOPERM/);
  });

  it("reads the requests sent to its namespace's pods, not another's, and cannot send one", async () => {
    const send = runnerRequestSender(manager);
    const first: MigrationRequest = { id: 'm1', role: 'source', mirror: [] };
    await send('team-a', 'pod-uid-1', first);
    const received: MigrationRequest[] = [];
    const channel = watchRunnerRequests({
      redis: new Redis(urls['team-a']!.runner),
      namespace: 'team-a',
      podUid: 'pod-uid-1',
      logger,
      onRequest: (request) => received.push(request),
    });
    try {
      await eventually(() => expect(received).toEqual([first]));
      await send('team-a', 'pod-uid-1', { ...first, abort: true });
      await eventually(() => expect(received).toEqual([first, { ...first, abort: true }]));
    } finally {
      channel.close();
    }
    const teamA = as(urls['team-a']!.runner);
    const request = runnerRequestKey('team-a', 'pod-uid-1');
    expect(await teamA('XREAD', 'STREAMS', request, '0')).toBe('OK');
    expect(await teamA('XADD', request, '*', 'request', '{}')).toMatch(/NOPERM/);
    expect(await as(urls['team-b']!.runner)('XREAD', 'STREAMS', request, '0')).toMatch(/NOPERM/);
  });

  it("gives the importer its disks' progress and nothing else", async () => {
    const progress = redisProgress({
      redisUrl: urls['team-a']!.importer,
      vmKey: 'image:team-a/debian',
      volume: 'image',
      podUid: 'importer-1',
      logger,
    });
    progress.send({ bytes: 42, attempt: 1 });
    await progress.close();
    expect(
      JSON.parse((await manager.get(importProgressRedisKey('image:team-a/debian', 'image')))!),
    ).toMatchObject({
      bytes: 42,
    });
    await eventually(() => expect(enqueued).toContain('image:team-a/debian'));
    const importer = as(urls['team-a']!.importer);
    expect(await importer('SET', importProgressRedisKey('vm:team-a/web', 'root'), '{}')).toBe('OK');
    expect(await importer('SET', snapshotRedisKey('vm:team-a/web'), '{}')).toMatch(/NOPERM/);
    expect(await importer('XREAD', 'STREAMS', runnerRequestKey('team-a', 'pod-uid-1'), '0')).toMatch(
      /NOPERM/,
    );
    expect(await importer('SET', importProgressRedisKey('vm:team-b/db', 'root'), '{}')).toMatch(/NOPERM/);
  });

  it("a flood of one namespace's writes costs that namespace: it is cut off for a while and its key reconciled once; another's write goes through", async () => {
    const before = enqueued.length;
    const user = async () => (await manager.call('ACL', 'GETUSER', 'vmop-runner.team-b')) as unknown[];
    const flags = async () => (await user())[(await user()).indexOf('flags') + 1] as string[];
    // SETs of her VM's snapshot as fast as Redis takes them, 10,000 a pipeline, until refused
    // (at most 500,000).
    const flood = new Redis(urls['team-b']!.runner, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    flood.on('error', () => undefined);
    clients.push(flood);
    const flooding = (async () => {
      let done = 0;
      for (let batch = 0; batch < 50; batch++) {
        const writes = flood.pipeline();
        for (let i = 0; i < 10_000; i++) writes.set(snapshotRedisKey('vm:team-b/db'), `{"n":${i}}`);
        const replies = await writes.exec().catch(() => undefined);
        const ran = replies?.filter(([err]) => !err).length ?? 0;
        done += ran;
        if (ran < 10_000) break;
      }
      return done;
    })();
    await as(urls['team-a']!.runner)('SET', snapshotRedisKey('vm:team-a/web'), '{"n":"a"}');
    // The managers turned her user off and dropped its connection: most of her flood never ran.
    const done = await flooding;
    expect(done).toBeLessThan(500_000);
    expect(await flags()).toContain('off');
    await eventually(() => expect(enqueued.slice(before)).toContain('vm:team-a/web'));
    // Her key: at most FLOOD_BOUND's 50 writes told, then none while it is not followed, then
    // once (what she wrote meanwhile) when it is followed again; her user on again.
    // Followed again a quiet time after it was silenced (under load that may come before the flood
    // ends, and before team-a's write is seen: run1 of stop 62 looked too late and missed it).
    await eventually(() =>
      expect(
        enqueued.some(
          (key, i) => key === 'vm:team-b/db' && enqueuedAt[i]! >= silencedAt! + FLOOD_BOUND.quietMs,
        ),
      ).toBe(true),
    );
    const theirs = enqueued.slice(before).filter((key) => key === 'vm:team-b/db');
    expect(theirs.length).toBeLessThanOrEqual(52);
    await eventually(async () => expect(await flags()).toContain('on'), SUSPEND_MS * 3);
    expect(await as(urls['team-b']!.runner)('SET', snapshotRedisKey('vm:team-b/db'), '{}')).toBe('OK');
    console.log(`a flood of SETs: ${done} ran before her user was cut off`);
  });

  it('are made again when Redis comes back without them, and a runner publishes again', async () => {
    const publisher = redisPublisher({ redisUrl: urls['team-a']!.runner, vmKey: 'vm:team-a/web', logger });
    try {
      publisher.publish(snapshot(2), { event: 'RUNNER_RESUMED' });
      await eventually(async () =>
        expect(await snapshotReader(manager, logger)('vm:team-a/web')).toMatchObject({ seq: 2 }),
      );
      // Restarted empty on the same address: only the ACL file's users, notifications off.
      await server.stop();
      server = await startRedis({ port: server.port, extraArgs: ['--aclfile', aclFile] });
      await eventually(() => expect(missed).toBeGreaterThan(0));
      const before = enqueued.length;
      publisher.publish(snapshot(3), { event: 'RUNNER_RESUMED' });
      await eventually(async () =>
        expect(await snapshotReader(manager, logger)('vm:team-a/web')).toMatchObject({ seq: 3 }),
      );
      // The managers turned the notifications on again: the write is told.
      await eventually(() => expect(enqueued.slice(before)).toContain('vm:team-a/web'));
      expect(await manager.call('ACL', 'USERS')).toEqual(
        expect.arrayContaining(['vmop-runner.team-a', 'vmop-importer.team-b']),
      );
    } finally {
      await publisher.close();
    }
  });
});
