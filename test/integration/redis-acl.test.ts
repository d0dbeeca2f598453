// Each namespace's runner and importer Redis users, as the managers make them (tenant-credentials.ts),
// on a real Redis with the chart's ACL file (the default user off): a runner publishes its VMs'
// state and reads its pods' requests, and can reach nothing of another namespace nor the queue.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { importProgressRedisKey } from '../../src/api/import-progress.js';
import { runnerRequestKey } from '../../src/api/runner-request.js';
import { snapshotRedisKey, type RunnerSnapshot } from '../../src/api/runner-snapshot.js';
import { runnerEventsKey, type TenantCredentials, type TenantRedisUrls } from '../../src/api/tenant-redis.js';
import { redisAclFile, REDIS_USERS } from '../../src/devenv/redis-acl.js';
import { startRedis, type RedisServer } from '../../src/devenv/redis.js';
import { runnerRequestSender } from '../../src/operator/runner-requests.js';
import { snapshotReader } from '../../src/operator/snapshots.js';
import { tenantCredentials } from '../../src/operator/tenant-credentials.js';
import { pumpRunnerEvents, type RunnerEventPump } from '../../src/queue/runner-events.js';
import { redisProgress } from '../../src/importer/progress.js';
import { redisPublisher } from '../../src/runner/publish.js';
import { watchRunnerRequests } from '../../src/runner/migration/request-channel.js';
import type { MigrationRequest } from '../../src/runner/migration/request.js';
import { createLogger } from '../../src/util/logger.js';
import { eventually } from '../support/eventually.js';

const PASSWORDS = { manager: 'm-secret', runner: 'r-base', replication: 'l-secret', sentinel: 's-secret' };
const logger = createLogger('acl-test');

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
  let credentials: TenantCredentials;
  let pump: RunnerEventPump;
  const enqueued: Array<{ key: string; event: unknown }> = [];
  const overflowed: string[] = [];
  /** The VMs and images the managers' caches have. */
  const KNOWN = new Set(['vm:team-a/web', 'vm:team-b/db', 'image:team-a/debian']);
  const urls: Record<string, TenantRedisUrls> = {};
  const clients: Redis[] = [];
  const managerUrl = () => `redis://${REDIS_USERS.manager}:${PASSWORDS.manager}@127.0.0.1:${server.port}`;
  /** The error Redis answers `url`'s credential with, or 'OK' when it allowed the command. */
  const as = (url: string) => {
    const client = new Redis(url, { maxRetriesPerRequest: 0 });
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
    server = await startRedis({ extraArgs: ['--aclfile', aclFile] });
    manager = new Redis(managerUrl());
    credentials = tenantCredentials({
      redis: manager,
      runnerRedisUrl: `redis://${REDIS_USERS.runner}:${PASSWORDS.runner}@127.0.0.1:${server.port}`,
      knownNamespaces: () => Object.keys(urls),
      logger,
    });
    for (const namespace of ['team-a', 'team-b', 'team'])
      urls[namespace] = await credentials.forNamespace(namespace);
    pump = pumpRunnerEvents({
      redis: new Redis(managerUrl(), { maxRetriesPerRequest: null }),
      namespaces: () => Object.keys(urls),
      enqueue: async (key, event) => void enqueued.push({ key, event }),
      known: (key) => KNOWN.has(key),
      overflowed: async (namespace) => void overflowed.push(namespace),
      consumer: 'test',
      logger,
    });
  });

  afterAll(async () => {
    await pump?.stop();
    for (const client of clients) client.disconnect();
    manager?.disconnect();
    await server?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("publishes a VM's snapshot and the managers enqueue its key", async () => {
    const publisher = redisPublisher({ redisUrl: urls['team-a']!.runner, vmKey: 'vm:team-a/web', logger });
    publisher.publish(snapshot(1), { event: 'RUNNER_RESUMED' });
    await publisher.close();
    expect(await snapshotReader(manager, logger)('vm:team-a/web')).toMatchObject({ seq: 1, runId: 'run-1' });
    await eventually(() =>
      expect(enqueued).toContainEqual({ key: 'vm:team-a/web', event: { event: 'RUNNER_RESUMED' } }),
    );
    // Moved, not kept: the stream holds nothing read twice.
    await eventually(async () => expect(await manager.xlen(runnerEventsKey('team-a'))).toBe(0));
  });

  it("cannot write another namespace's snapshot, event stream or the queue", async () => {
    const teamB = as(urls['team-b']!.runner);
    expect(await teamB('SET', snapshotRedisKey('vm:team-b/db'), '{}')).toBe('OK');
    for (const [command, ...args] of [
      ['SET', snapshotRedisKey('vm:team-a/web'), '{"seq":99}'],
      ['SET', snapshotRedisKey('vm:team-a/web@web-target'), '{}'],
      ['GET', snapshotRedisKey('vm:team-a/web')],
      ['DEL', snapshotRedisKey('vm:team-a/web')],
      ['XADD', runnerEventsKey('team-a'), '*', 'key', 'vm:team-a/web', 'event', '{}'],
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
    ]) {
      expect(`${command} ${args.join(' ')}: ${await teamB(command!, ...args)}`).toMatch(/: NOPERM/);
    }
    // `team` is a prefix of `team-b`, not its owner.
    expect(await as(urls['team']!.runner)('SET', snapshotRedisKey('vm:team-b/db'), '{}')).toMatch(/NOPERM/);
    expect(await snapshotReader(manager, logger)('vm:team-a/web')).toMatchObject({ seq: 1 });
  });

  it("drops an event its stream's namespace does not own", async () => {
    await as(urls['team-b']!.runner)(
      'XADD',
      runnerEventsKey('team-b'),
      '*',
      'key',
      'vm:team-a/web',
      'event',
      '{}',
    );
    await as(urls['team-b']!.runner)(
      'XADD',
      runnerEventsKey('team-b'),
      '*',
      'key',
      'vm:team-b/db',
      'event',
      '{}',
    );
    await eventually(() => expect(enqueued.map((e) => e.key)).toContain('vm:team-b/db'));
    expect(enqueued.filter((e) => e.key === 'vm:team-a/web')).toHaveLength(1); // the publish above
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
    await eventually(() => expect(enqueued.map((e) => e.key)).toContain('image:team-a/debian'));
    const importer = as(urls['team-a']!.importer);
    expect(await importer('SET', importProgressRedisKey('vm:team-a/web', 'root'), '{}')).toBe('OK');
    expect(await importer('SET', snapshotRedisKey('vm:team-a/web'), '{}')).toMatch(/NOPERM/);
    expect(await importer('XREAD', 'STREAMS', runnerRequestKey('team-a', 'pod-uid-1'), '0')).toMatch(
      /NOPERM/,
    );
    expect(await importer('SET', importProgressRedisKey('vm:team-b/db', 'root'), '{}')).toMatch(/NOPERM/);
  });

  it("a flood of one namespace's stream costs that namespace: each key once, the stream trimmed, its VMs reconciled, another's event through", async () => {
    const flooded = runnerEventsKey('team-b');
    const before = enqueued.length;
    // 50,000 entries at once, as a tenant's flood leaves her stream (written in one transaction so
    // that the managers find them all there), a fifth of them for objects nobody has.
    const flood = manager.multi();
    for (let i = 0; i < 50_000; i++)
      flood.xadd(flooded, '*', 'key', i % 5 ? 'vm:team-b/db' : `vm:team-b/pad${i}`, 'event', `{"n":${i}}`);
    await flood.exec();
    await as(urls['team-a']!.runner)(
      'XADD',
      runnerEventsKey('team-a'),
      '*',
      'key',
      'vm:team-a/web',
      'event',
      '{"n":"a"}',
    );
    await eventually(() =>
      expect(enqueued.slice(before)).toContainEqual({ key: 'vm:team-a/web', event: { n: 'a' } }),
    );
    await eventually(async () => expect(await manager.xlen(flooded)).toBe(0));
    const theirs = enqueued.slice(before).filter((e) => e.key.startsWith('vm:team-b/'));
    // Her VM's key once per batch read at most, none for what does not exist.
    expect(theirs.every((e) => e.key === 'vm:team-b/db')).toBe(true);
    expect(theirs.length).toBeGreaterThan(0);
    expect(theirs.length).toBeLessThan(50);
    // Her stream was longer than the managers keep: trimmed, and her namespace reconciled whole.
    expect(overflowed).toContain('team-b');
    expect(overflowed).not.toContain('team-a');
  });

  it('are made again when Redis comes back without them, and a runner publishes again', async () => {
    const publisher = redisPublisher({ redisUrl: urls['team-a']!.runner, vmKey: 'vm:team-a/web', logger });
    try {
      publisher.publish(snapshot(2), { event: 'RUNNER_RESUMED' });
      await eventually(async () =>
        expect(await snapshotReader(manager, logger)('vm:team-a/web')).toMatchObject({ seq: 2 }),
      );
      // Restarted empty on the same address: only the ACL file's users.
      await server.stop();
      server = await startRedis({ port: server.port, extraArgs: ['--aclfile', aclFile] });
      publisher.publish(snapshot(3), { event: 'RUNNER_RESUMED' });
      await eventually(async () =>
        expect(await snapshotReader(manager, logger)('vm:team-a/web')).toMatchObject({ seq: 3 }),
      );
      expect(await manager.call('ACL', 'USERS')).toEqual(
        expect.arrayContaining(['vmop-runner.team-a', 'vmop-importer.team-b']),
      );
    } finally {
      await publisher.close();
    }
  });
});
