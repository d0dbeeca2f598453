// What the runners and importers of one namespace may do in vmop's Redis: each namespace has its
// own two ACL users, made by the managers, so a runner (or an importer, which parses untrusted
// downloads) can write only its own namespace's snapshots and signals, and read only the requests
// sent to its own namespace's pods. Nothing here reaches BullMQ's keys: a runner signals a change
// on its namespace's event stream and a manager enqueues the key (operator/runner-events.ts).
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

/** The stream a namespace's runners and importers signal changes on (one entry per change). */
export const runnerEventsKey = (namespace: string) => `vmop:events:${namespace}`;

/** Fields of an event stream entry: the work key that changed and what happened (JSON). */
export const EVENT_KEY_FIELD = 'key';
export const EVENT_FIELD = 'event';

/** A stream keeps at most about this many entries: the managers read them within milliseconds. */
export const EVENTS_MAX_LENGTH = 1000;

/**
 * Commands a tenant user may run besides its own: connecting, ioredis' ready check (INFO), naming
 * itself, closing (ioredis' CLIENT SETINFO is refused and it carries on: Redis 7.0 has none). Not
 * `@connection` as a whole: its CLIENT TRACKING … BCAST would tell a tenant the key names other
 * namespaces write (on Redis versions before that was fixed).
 */
const CONNECTION = ['-@all', '+auth', '+hello', '+ping', '+quit', '+info', '+client|setname'];

/**
 * The ACL rules of a tenant user (after its name, for `ACL SETUSER`). Key patterns end in `/`
 * after the namespace, so `team` never matches `team-b`'s keys. `passwordHash` is SHA-256 hex.
 */
export function tenantAclRules(role: TenantRole, namespace: string, passwordHash: string): string[] {
  const common = ['on', 'resetpass', `#${passwordHash}`, 'resetchannels', 'resetkeys'];
  const events = `%W~${runnerEventsKey(namespace)}`;
  if (role === 'runner')
    return [
      ...common,
      // Its VMs' snapshots, a migration target's (`…@pod`) and import progress of its VMs' disks.
      `~vmop:snapshot:vm:${namespace}/*`,
      events,
      `%R~vmop:request:${namespace}/*`,
      ...CONNECTION,
      '+set',
      '+xadd',
      '+xread',
    ];
  return [
    ...common,
    // Only a disk's import progress, of a VM's disk or an image's.
    `~vmop:snapshot:vm:${namespace}/*#import/*`,
    `~vmop:snapshot:image:${namespace}/*#import/*`,
    events,
    ...CONNECTION,
    '+set',
    '+xadd',
  ];
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
