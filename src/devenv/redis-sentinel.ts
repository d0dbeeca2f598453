// Redis as the chart's Sentinel mode runs it, on loopback: a master, its replicas and a quorum of
// Sentinels, with the chart's ACL users on every server and a password on the Sentinels. For
// `vmop dev --redis sentinel` and the failover tests.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort } from '../util/free-port.js';
import type { ProcessGroup } from './process-group.js';
import { REDIS_SETTINGS, startRedis, type RedisServer } from './redis.js';
import { redisAclFile, REDIS_USERS, type RedisPasswords } from './redis-acl.js';

export const SENTINEL_MASTER = 'vmop';

export interface SentinelSetOptions {
  /** Redis servers, the first the master at start (default 3). */
  servers?: number;
  sentinels?: number;
  /** The ACL users' passwords (the same users.acl on every server: ACLs are not replicated). */
  passwords: RedisPasswords;
  sentinelPassword: string;
  /** Where every server and Sentinel listens (default 127.0.0.1; a local node's pods need the node network's host address). */
  host?: string;
  /** Called with every server and Sentinel started (a restart's too). */
  onStart?: () => void;
  /** The process group its servers and Sentinels run in. */
  group?: ProcessGroup;
}

export interface SentinelSet {
  servers: RedisServer[];
  sentinels: RedisServer[];
  /** The managers' redis+sentinel:// URL; `withUser` for another ACL user. */
  url: string;
  withUser(user: string, password: string): string;
  /**
   * Every server and Sentinel SIGKILLed at once, and the set started again on the same ports with
   * nothing in it (what a whole set lost with its data looks like to its clients).
   * `servers` and `sentinels` then hold the new processes.
   */
  killAndRestartEmpty(): Promise<void>;
  stop(): Promise<void>;
}

/** What this loopback set waits before failing a silent master over (the chart's default is 5 s). */
const DOWN_AFTER_MS = 3000;
/**
 * A master that heard from no replica for this many seconds refuses writes: below DOWN_AFTER_MS,
 * as the chart requires, so a cut-off master stops about when another is promoted.
 */
const MIN_REPLICAS_MAX_LAG_S = 2;

export async function startSentinelSet(options: SentinelSetOptions): Promise<SentinelSet> {
  const { passwords, sentinelPassword } = options;
  const host = options.host ?? '127.0.0.1';
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-sentinel-'));
  const aclFile = path.join(dir, 'users.acl');
  await writeFile(aclFile, await redisAclFile(passwords), { mode: 0o600 });
  const everyServer = [
    ...['--aclfile', aclFile],
    ...REDIS_SETTINGS,
    ...['--masteruser', REDIS_USERS.replication, '--masterauth', passwords.replication],
    // A replica's full sync writes an RDB file: into the set's directory, not the caller's.
    ...['--dir', dir],
    // A master that has not heard from a replica for the lag stops taking writes: a partitioned
    // old master takes writes for seconds at most (lost when it rejoins).
    ...['--min-replicas-to-write', '1', '--min-replicas-max-lag', String(MIN_REPLICAS_MAX_LAG_S)],
  ];
  const serverCount = options.servers ?? 3;
  const sentinelCount = options.sentinels ?? 3;
  const servers: RedisServer[] = [];
  const sentinels: RedisServer[] = [];
  const started = (server: RedisServer) => (options.onStart?.(), server);
  const { group } = options;

  /** Starts the set, empty, the first server its master: on free ports, or on those of `ports`. */
  const launch = async (ports?: { servers: number[]; sentinels: number[] }) => {
    await rm(path.join(dir, 'dump.rdb'), { force: true });
    const master = started(
      await startRedis({ host, port: ports?.servers[0], extraArgs: everyServer, group }),
    );
    servers.splice(0, servers.length, master);
    for (let i = 1; i < serverCount; i++) {
      const replicaOf = ['--replicaof', host, String(master.port)];
      servers.push(
        started(
          await startRedis({
            host,
            port: ports?.servers[i],
            extraArgs: [...everyServer, ...replicaOf],
            group,
          }),
        ),
      );
    }
    sentinels.splice(0);
    for (let i = 0; i < sentinelCount; i++) {
      const port = ports?.sentinels[i] ?? (await freePort(host));
      const configFile = path.join(dir, `sentinel-${i}.conf`);
      // Written anew each launch: a Sentinel rewrites its file with what it learnt (peers, epochs).
      await writeFile(
        configFile,
        [
          `sentinel monitor ${SENTINEL_MASTER} ${host} ${master.port} ${Math.floor(sentinelCount / 2) + 1}`,
          `sentinel auth-user ${SENTINEL_MASTER} ${REDIS_USERS.sentinel}`,
          `sentinel auth-pass ${SENTINEL_MASTER} ${passwords.sentinel}`,
          `sentinel down-after-milliseconds ${SENTINEL_MASTER} ${DOWN_AFTER_MS}`,
          `sentinel failover-timeout ${SENTINEL_MASTER} 5000`,
          `requirepass ${sentinelPassword}`,
          // Sentinels log in to each other with the same password.
          `sentinel sentinel-pass ${sentinelPassword}`,
          '',
        ].join('\n'),
        { mode: 0o600 },
      );
      sentinels.push(started(await startRedis({ host, port, configFile, extraArgs: ['--sentinel'], group })));
    }
    await ready(host, master.port, servers.length - 1, sentinels, {
      manager: passwords.manager,
      sentinelPassword,
    });
  };
  const stopAll = () => Promise.all([...sentinels, ...servers].map((s) => s.stop()));

  await launch();
  const hosts = sentinels.map((s) => `${host}:${s.port}`).join(',');
  const withUser = (user: string, userPassword: string) =>
    `redis+sentinel://${encodeURIComponent(user)}:${encodeURIComponent(userPassword)}@${hosts}/${SENTINEL_MASTER}` +
    `?sentinelPassword=${encodeURIComponent(sentinelPassword)}`;
  return {
    servers,
    sentinels,
    url: withUser(REDIS_USERS.manager, passwords.manager),
    withUser,
    async killAndRestartEmpty() {
      const ports = { servers: servers.map((s) => s.port), sentinels: sentinels.map((s) => s.port) };
      // A server a test killed before is left alone (kill() asks its own handle).
      for (const s of [...sentinels, ...servers]) s.kill('SIGKILL');
      await Promise.all([...sentinels, ...servers].map((s) => s.exited));
      await launch(ports);
    },
    async stop() {
      await stopAll();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Until every replica is in sync with the master and every Sentinel knows them and its peers:
 * a set that takes writes (min-replicas-to-write) and can fail over.
 */
async function ready(
  host: string,
  masterPort: number,
  replicas: number,
  sentinels: RedisServer[],
  secrets: { manager: string; sentinelPassword: string },
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const master = new Redis({
    host,
    port: masterPort,
    username: REDIS_USERS.manager,
    password: secrets.manager,
    lazyConnect: true,
  });
  const watchers = sentinels.map(
    (s) => new Redis({ host, port: s.port, password: secrets.sentinelPassword, lazyConnect: true }),
  );
  const count = (reply: unknown) => (Array.isArray(reply) ? reply.length : 0);
  try {
    for (;;) {
      const info = await master.info('replication');
      const online = info.match(/state=online/g)?.length ?? 0;
      const known = await Promise.all(
        watchers.map(async (w) => [
          count(await w.call('SENTINEL', 'REPLICAS', SENTINEL_MASTER)),
          count(await w.call('SENTINEL', 'SENTINELS', SENTINEL_MASTER)),
        ]),
      );
      if (online === replicas && known.every(([r, s]) => r === replicas && s === sentinels.length - 1))
        return;
      if (Date.now() > deadline)
        throw new Error(
          `the Sentinel set did not form: ${online} replicas online, Sentinels know ${JSON.stringify(known)}`,
        );
      await sleep(200);
    }
  } finally {
    master.disconnect();
    for (const w of watchers) w.disconnect();
  }
}
