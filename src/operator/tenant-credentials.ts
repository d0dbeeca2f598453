// The Redis credentials of each namespace's runners and importers (api/tenant-redis.ts): their ACL
// users made in Redis before a pod names them, and made again whenever the managers' connection
// comes back (a Redis restarted without persistence, or a Sentinel's new master: ACL users are not
// replicated), from the namespaces alone since the passwords are derived. Their keys follow the
// namespace's pods (operator/tenant-keys.ts): `refresh` sets them again when those change.
import type { Redis } from 'ioredis';
import {
  redisUrlPassword,
  redisUrlWithUser,
  sha256Hex,
  tenantAclRules,
  tenantRedisPassword,
  tenantRedisUser,
  type TenantCredentials,
  type TenantKeys,
  type TenantRole,
} from '../api/tenant-redis.js';
import type { Logger } from '../util/logger.js';

/** Without a runner credential (`--runner-redis-url`), every pod gets the managers' own URL. */
export const sharedCredentials = (redisUrl: string): TenantCredentials => ({
  forNamespace: async () => ({ runner: redisUrl, importer: redisUrl }),
});

const ROLES: TenantRole[] = ['runner', 'importer'];

export function tenantCredentials(options: {
  /** The managers' connection, whose user may run ACL SETUSER. */
  redis: Redis;
  /** Where the pods reach Redis, with the base credential whose password the users' derive from. */
  runnerRedisUrl: string;
  /** Namespaces whose users must exist (those with a runner Secret), for a connection that came back. */
  knownNamespaces: () => Iterable<string>;
  /** The keys a namespace's users may write now. */
  keysOf: (namespace: string) => TenantKeys;
  logger: Logger;
}): TenantCredentials & {
  refresh(namespace: string): Promise<void>;
  /** Turns the namespace's users off and drops their connections for `forMs` (they flooded Redis). */
  suspend(namespace: string, forMs: number): Promise<void>;
} {
  const { redis, runnerRedisUrl, logger } = options;
  const base = redisUrlPassword(runnerRedisUrl);
  if (!base)
    throw new Error('--runner-redis-url: needs a password (the runners’ users derive theirs from it)');
  const password = (role: TenantRole, namespace: string) => tenantRedisPassword(base, role, namespace);
  /**
   * The keys each namespace's users were given on this connection (a new connection may face a
   * Redis without them); a namespace's users are set one at a time, so the latest keys win.
   */
  let made = new Map<string, string>();
  const setting = new Map<string, Promise<void>>();
  const suspended = new Set<string>();

  const set = async (namespace: string) => {
    const keys = options.keysOf(namespace);
    const on = !suspended.has(namespace);
    const given = JSON.stringify({ keys, on });
    if (made.get(namespace) === given) return;
    const transaction = redis.multi();
    for (const role of ROLES)
      transaction.call(
        'ACL',
        'SETUSER',
        tenantRedisUser(role, namespace),
        ...tenantAclRules(role, namespace, sha256Hex(password(role, namespace)), keys[role], on),
      );
    const replies = await transaction.exec();
    const failed = replies?.find(([err]) => err)?.[0];
    if (failed) throw new Error(`making the Redis users of namespace ${namespace} failed: ${failed.message}`);
    made.set(namespace, given);
  };
  const make = (namespace: string): Promise<void> => {
    const next = (setting.get(namespace) ?? Promise.resolve())
      .catch(() => undefined)
      .then(() => set(namespace));
    setting.set(namespace, next);
    void next
      .finally(() => setting.get(namespace) === next && setting.delete(namespace))
      .catch(() => undefined);
    return next;
  };

  redis.on('ready', () => {
    made = new Map();
    const namespaces = [...options.knownNamespaces()];
    if (namespaces.length === 0) return;
    void Promise.all(namespaces.map(make)).then(
      () => logger.info({ namespaces: namespaces.length }, "made the namespaces' runner Redis users"),
      (err: Error) =>
        logger.warn({ reason: err.message }, "making the namespaces' runner Redis users failed"),
    );
  });

  return {
    async refresh(namespace) {
      if (made.has(namespace)) await make(namespace);
    },
    async suspend(namespace, forMs) {
      if (suspended.has(namespace)) return;
      suspended.add(namespace);
      logger.warn({ namespace, forMs }, "a namespace's runners flood Redis: their users are off for a while");
      setTimeout(() => {
        suspended.delete(namespace);
        void make(namespace).catch((err: Error) =>
          logger.warn(
            { namespace, reason: err.message },
            "turning a namespace's Redis users on again failed",
          ),
        );
      }, forMs).unref();
      await make(namespace);
      // Off refuses new logins only: the connections they have go too.
      for (const role of ROLES) await redis.call('CLIENT', 'KILL', 'USER', tenantRedisUser(role, namespace));
    },
    async forNamespace(namespace) {
      if (!made.has(namespace)) await make(namespace);
      const url = (role: TenantRole) =>
        redisUrlWithUser(runnerRedisUrl, tenantRedisUser(role, namespace), password(role, namespace));
      return { runner: url('runner'), importer: url('importer') };
    },
  };
}
