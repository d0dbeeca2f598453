import { createIORedisClient, RedisConnection, type RedisOptions as BullRedisOptions } from 'bullmq';
import { Redis, type RedisOptions } from 'ioredis';
import { z } from 'zod';
import { followFailovers } from './failover-watch.js';

/**
 * Where Redis is: `redis://` or `rediss://` (one server), or `redis+sentinel://` (the master a
 * set of Sentinels names): `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTER
 * [?sentinelPassword=…]`. USER and PASSWORD are the Redis credentials, the same on every server
 * of the set, so they hold through a failover; sentinelPassword is the Sentinels' own.
 */
export const RedisUrlSchema = z
  .string()
  .regex(
    /^(rediss?:\/\/\S+|redis\+sentinel:\/\/\S+\/\S+)$/,
    'a Redis URL looks like redis://host:port or redis+sentinel://host:port,host:port/master',
  );

const SENTINEL_URL = /^redis\+sentinel:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/?]+)\/([^/?]+)\/?(?:\?(.*))?$/;

/** How to reach a Redis: its URL, or the Sentinels that name its master (and the credentials). */
export interface RedisPlace {
  url?: string;
  sentinels?: Array<{ host: string; port: number }>;
  name?: string;
  username?: string;
  password?: string;
  sentinelPassword?: string;
  connectTimeout?: number;
}

/**
 * How long a client tries to reach a Sentinel or a master before the next: a Sentinel or master
 * cut off the network does not refuse, it leaves the connection unanswered (ioredis' default 10 s
 * delayed the move to a promoted master by as much).
 */
const SENTINEL_CONNECT_TIMEOUT_MS = 3_000;

/** The ioredis options that reach the Redis of `redisUrl` (pure). */
export function redisOptionsOf(redisUrl: string): RedisPlace {
  if (!redisUrl.startsWith('redis+sentinel://')) return { url: redisUrl };
  const sentinel = SENTINEL_URL.exec(redisUrl);
  if (!sentinel) throw new Error('a Sentinel URL looks like redis+sentinel://host:port,host:port/master');
  const [, user, password, hosts, master, query] = sentinel;
  const sentinels = hosts!.split(',').map((hostPort) => {
    const at = hostPort.lastIndexOf(':');
    const port = at < 0 ? 26379 : Number(hostPort.slice(at + 1));
    if (!Number.isInteger(port) || port <= 0 || port > 65535)
      throw new Error(`a Sentinel address looks like host:port, not ${hostPort}`);
    return { host: at < 0 ? hostPort : hostPort.slice(0, at), port };
  });
  const sentinelPassword = new URLSearchParams(query ?? '').get('sentinelPassword') ?? undefined;
  return {
    sentinels,
    name: decodeURIComponent(master!),
    connectTimeout: SENTINEL_CONNECT_TIMEOUT_MS,
    ...(user && { username: decodeURIComponent(user) }),
    ...(password !== undefined && { password: decodeURIComponent(password) }),
    ...(sentinelPassword !== undefined && { sentinelPassword }),
  };
}

/** A client of `redisUrl` with more options; a Sentinel URL's master is looked up and followed. */
export function connectRedis(redisUrl: string, options: RedisOptions = {}): Redis {
  const { url, ...where } = redisOptionsOf(redisUrl);
  return withFailovers(url ? new Redis(url, options) : new Redis({ ...where, ...options }));
}

/** A client of a master found through Sentinels moves when they announce another (failover-watch.ts). */
function withFailovers(client: Redis): Redis {
  const { sentinels, name, sentinelPassword } = client.options;
  if (sentinels?.length && name)
    followFailovers(client, {
      sentinels: sentinels.map(({ host, port }) => ({ host: host ?? 'localhost', port: port ?? 26379 })),
      name,
      ...(sentinelPassword && { sentinelPassword }),
    });
  return client;
}

/** BullMQ's own clients (made from bullConnection's options) follow failovers too. */
RedisConnection.clientFactory ??= (options) => {
  const { url, ...rest } = options as RedisOptions & { url?: string };
  return createIORedisClient(withFailovers(url ? new Redis(url, rest) : new Redis(rest)));
};

/** The servers of `redisUrl` without credentials, for messages and logs. */
export function redisWhere(redisUrl: string): string {
  try {
    const { url, sentinels, name } = redisOptionsOf(redisUrl);
    if (url) return new URL(url).host;
    return `${name} of Sentinels ${sentinels!.map((s) => `${s.host}:${s.port}`).join(',')}`;
  } catch {
    return 'an unparsable Redis URL';
  }
}

/**
 * Connection options for BullMQ objects. `maxRetriesPerRequest: null` keeps commands queued
 * across a Redis restart (or a failover) instead of failing them, which workers need.
 */
export function bullConnection(redisUrl: string): BullRedisOptions {
  return { ...redisOptionsOf(redisUrl), maxRetriesPerRequest: null };
}

/** A plain client for vmop's own keys, with the same retry behaviour as BullMQ's connections. */
export function openRedis(redisUrl: string): Redis {
  return connectRedis(redisUrl, { maxRetriesPerRequest: null });
}

/**
 * Fails fast when nothing answers at `redisUrl`: the clients above wait for Redis indefinitely,
 * which a worker wants but a command-line user does not.
 */
export async function assertRedisReachable(redisUrl: string, timeoutMs = 3000): Promise<void> {
  const probe = connectRedis(redisUrl, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    sentinelRetryStrategy: () => null,
  });
  let cause: unknown;
  probe.on('error', (err) => (cause = err));
  try {
    await probe.connect();
    await probe.ping();
  } catch (err) {
    const reason = cause ?? err;
    // The servers only: the URL may carry a password.
    throw new Error(
      `cannot reach Redis at ${redisWhere(redisUrl)}: ${reason instanceof Error ? reason.message : String(reason)}`,
    );
  } finally {
    probe.disconnect();
  }
}

/**
 * Redis refused the credential: a Redis that came back without the namespace's user (the managers
 * make it again on reconnecting). ioredis keeps such a connection open, unauthenticated, for good:
 * the caller reconnects to authenticate again.
 */
export const isAuthError = (err: unknown) => /^(NOAUTH|WRONGPASS)/.test((err as Error)?.message ?? '');
