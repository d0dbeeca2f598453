// The ACL users of vmop's Redis, as the Helm chart defines them (helm/vmop/files/*-acl-rules.txt):
// for local Redis that must behave as the chart's (`vmop dev`, tests). The runners' users are the
// managers' to make, one per namespace (operator/tenant-credentials.ts).
import { readFile } from 'node:fs/promises';

/**
 * The chart's users: the managers' and, in Sentinel mode, replication's and Sentinel's; `runner`
 * names the base credential the namespaces' runner users derive from (no user of its own).
 */
export const REDIS_USERS = {
  manager: 'vmop-manager',
  runner: 'vmop-runner',
  replication: 'vmop-replication',
  sentinel: 'vmop-sentinel',
} as const;

export type RedisPasswords = Record<keyof typeof REDIS_USERS, string>;

const rules = (name: string) =>
  readFile(new URL(`../../helm/vmop/files/${name}-acl-rules.txt`, import.meta.url), 'utf8').then((text) =>
    text.trim(),
  );

/** users.acl with the default user off, as the chart writes it (without the legacy runner user). */
export async function redisAclFile(passwords: RedisPasswords): Promise<string> {
  return [
    'user default off',
    `user ${REDIS_USERS.manager} on >${passwords.manager} ~* &* +@all`,
    `user ${REDIS_USERS.replication} on >${passwords.replication} ${await rules('replication')}`,
    `user ${REDIS_USERS.sentinel} on >${passwords.sentinel} ${await rules('sentinel')}`,
    '',
  ].join('\n');
}
