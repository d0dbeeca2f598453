// What the runners and importers of one namespace may do in vmop's Redis: each namespace has its
// own two ACL users, made by the managers, so a runner (or an importer, which parses untrusted
// downloads) can SET exactly the keys of the pods vmop made in its namespace (one snapshot and one
// usage history per runner pod, one progress per importer pod: operator/tenant-keys.ts), and read
// only the requests sent to its own namespace's pods. So what a namespace can store is bounded by
// what it may run, each value by Redis' proto-max-bulk-len. Nothing here reaches BullMQ's keys: the
// SET itself tells the managers (keyspace notifications, queue/snapshot-writes.ts).
import { createHash, createHmac } from 'node:crypto';

export type TenantRole = 'runner' | 'importer';

/** The Redis URLs a namespace's runner and importer pods are given (in its runner Secret). */
export interface TenantRedisUrls {
  runner: string;
  importer: string;
}

/** Gives each namespace its URLs (operator/tenant-credentials.ts makes the users behind them). */
export interface TenantCredentials {
  forNamespace(namespace: string): Promise<TenantRedisUrls>;
}

/** The ACL user of a namespace's runners or importers (namespaces have no dots, so no clash). */
export const tenantRedisUser = (role: TenantRole, namespace: string) => `vmop-${role}.${namespace}`;

/** Matches the users above, for telling them from the chart's own. */
export const TENANT_REDIS_USER = /^vmop-(runner|importer)\.([a-z0-9-]+)$/;

/**
 * A tenant user's password: derived from the base credential the admin gave the managers
 * (`--runner-redis-url`), so every replica computes the same one and a Redis that lost its users
 * gets them back from the namespaces alone. Only the managers know the base.
 */
export function tenantRedisPassword(base: string, role: TenantRole, namespace: string): string {
  return createHmac('sha256', base).update(`vmop:${role}:${namespace}`).digest('hex');
}

/**
 * Commands a tenant user may run besides its own: connecting, ioredis' ready check (INFO), naming
 * itself, closing (ioredis' CLIENT SETINFO is refused and it carries on: Redis 7.0 has none). Not
 * `@connection` as a whole: its CLIENT TRACKING … BCAST would tell a tenant the key names other
 * namespaces write (on Redis versions before that was fixed).
 */
const CONNECTION = ['-@all', '+auth', '+hello', '+ping', '+quit', '+info', '+client|setname'];

/** The keys of a namespace that its runners and its importers may write. */
export interface TenantKeys {
  runner: string[];
  importer: string[];
}

/**
 * The ACL rules of a tenant user (after its name, for `ACL SETUSER`): SET (and GET, a runner
 * its usage history) on exactly `keys`, no pattern, so a tenant cannot make keys of its own;
 * `on: false` refuses its logins (its namespace flooded Redis).
 */
export function tenantAclRules(
  role: TenantRole,
  namespace: string,
  passwordHash: string,
  keys: string[],
  on = true,
): string[] {
  const common = [
    on ? 'on' : 'off',
    'resetpass',
    `#${passwordHash}`,
    'resetchannels',
    'resetkeys',
    ...keys.map((key) => `~${key}`),
    ...CONNECTION,
    '+set',
  ];
  if (role === 'importer') return common;
  return [...common, '+get', `%R~vmop:request:${namespace}/*`, '+xread'];
}

export const sha256Hex = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * `url` with another user and password: `redis://`, `rediss://` or `redis+sentinel://` (whose
 * Sentinel password, in the query, stays).
 */
export function redisUrlWithUser(url: string, user: string, password: string): string {
  const credential = `${encodeURIComponent(user)}:${encodeURIComponent(password)}@`;
  const match = /^([a-z+]+:\/\/)(?:[^@/]*@)?(.*)$/.exec(url);
  if (!match) throw new Error('a Redis URL looks like redis://host:port');
  return `${match[1]}${credential}${match[2]}`;
}

/** The password of a Redis URL, if it has one. */
export function redisUrlPassword(url: string): string | undefined {
  const match = /^[a-z+]+:\/\/(?:[^:@/]*):([^@/]*)@/.exec(url);
  return match ? decodeURIComponent(match[1]!) : undefined;
}

/** The work key's namespace (`vm:ns/name` → ns), if it has one. */
export function workKeyNamespace(key: string): string | undefined {
  return /^[a-z][a-z0-9-]*:([a-z0-9-]+)\//.exec(key)?.[1];
}
