// The Redis credentials of each namespace's runners and importers (api/tenant-redis.ts): their ACL
// users made in Redis before a pod names them, and made again whenever the managers' connection
// comes back (a Redis restarted without persistence, or a Sentinel's new master: ACL users are not
// replicated), from the namespaces alone since the passwords are derived.
import type { Redis } from 'ioredis';
import {
  redisUrlPassword,
  redisUrlWithUser,
  sha256Hex,
  tenantAclRules,
  tenantRedisPassword,
  tenantRedisUser,
  type TenantCredentials,
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
  logger: Logger;
}): TenantCredentials {
  const { redis, runnerRedisUrl, logger } = options;
  const base = redisUrlPassword(runnerRedisUrl);
  if (!base)
    throw new Error('--runner-redis-url: needs a password (the runners’ users derive theirs from it)');
  const password = (role: TenantRole, namespace: string) => tenantRedisPassword(base, role, namespace);
  /** Namespaces whose users this connection has made; a new connection may face a Redis without them. */
  let made = new Set<string>();

  const make = async (namespace: string) => {
    const transaction = redis.multi();
    for (const role of ROLES)
      transaction.call(
        'ACL',
        'SETUSER',
        tenantRedisUser(role, namespace),
        ...tenantAclRules(role, namespace, sha256Hex(password(role, namespace))),
      );
    const replies = await transaction.exec();
    const failed = replies?.find(([err]) => err)?.[0];
    if (failed) throw new Error(`making the Redis users of namespace ${namespace} failed: ${failed.message}`);
    made.add(namespace);
  };

  redis.on('ready', () => {
    made = new Set();
    const namespaces = [...options.knownNamespaces()];
    if (namespaces.length === 0) return;
    void Promise.all(namespaces.map(make)).then(
      () => logger.info({ namespaces: namespaces.length }, "made the namespaces' runner Redis users"),
      (err: Error) =>
        logger.warn({ reason: err.message }, "making the namespaces' runner Redis users failed"),
    );
  });

  return {
    async forNamespace(namespace) {
      if (!made.has(namespace)) await make(namespace);
      const url = (role: TenantRole) =>
        redisUrlWithUser(runnerRedisUrl, tenantRedisUser(role, namespace), password(role, namespace));
      return { runner: url('runner'), importer: url('importer') };
    },
  };
}
