// The pure parts of the namespaces' Redis users: their URLs, passwords and rules.
import { describe, expect, it } from 'vitest';
import {
  redisUrlPassword,
  redisUrlWithUser,
  tenantAclRules,
  tenantRedisPassword,
  workKeyNamespace,
} from '../../../src/api/tenant-redis.js';
import { redisOptionsOf } from '../../../src/queue/connection.js';

describe("a namespace's Redis URLs", () => {
  it('replace the base user of a plain and a Sentinel URL, keeping the Sentinels and their password', () => {
    expect(redisUrlWithUser('redis://vmop-runner:base@redis:6379', 'vmop-runner.team-b', 'p@ss')).toBe(
      'redis://vmop-runner.team-b:p%40ss@redis:6379',
    );
    expect(redisUrlWithUser('redis://redis:6379', 'u', 'p')).toBe('redis://u:p@redis:6379');
    const sentinel = redisUrlWithUser(
      'redis+sentinel://vmop-runner:base@s-0:26379,s-1:26379/vmop?sentinelPassword=watch',
      'vmop-runner.team-b',
      'secret',
    );
    expect(redisOptionsOf(sentinel)).toMatchObject({
      username: 'vmop-runner.team-b',
      password: 'secret',
      sentinelPassword: 'watch',
      name: 'vmop',
      sentinels: [
        { host: 's-0', port: 26379 },
        { host: 's-1', port: 26379 },
      ],
    });
    expect(redisUrlPassword('redis://vmop-runner:b%40se@redis:6379')).toBe('b@se');
    expect(redisUrlPassword('redis://redis:6379')).toBeUndefined();
  });

  it('derive a password per namespace and role that only the base knows', () => {
    const a = tenantRedisPassword('base', 'runner', 'team-a');
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(tenantRedisPassword('base', 'runner', 'team-a')).toBe(a);
    expect(tenantRedisPassword('base', 'importer', 'team-a')).not.toBe(a);
    expect(tenantRedisPassword('base', 'runner', 'team-b')).not.toBe(a);
    expect(tenantRedisPassword('other', 'runner', 'team-a')).not.toBe(a);
  });

  it('name exactly the keys given, no pattern, and only requests of the namespace, ended by a slash', () => {
    const keys = ['vmop:snapshot:vm:team/web', 'vmop:snapshot:vm:team/web#usage'];
    const patterns = (role: 'runner' | 'importer') =>
      tenantAclRules(role, 'team', 'hash', keys).filter((rule) => /~/.test(rule));
    expect(patterns('runner')).toEqual([...keys.map((key) => `~${key}`), '%R~vmop:request:team/*']);
    expect(patterns('importer')).toEqual(keys.map((key) => `~${key}`));
    expect(tenantAclRules('importer', 'team', 'hash', [])).not.toContain('+get');
    expect(workKeyNamespace('vm:team-b/web')).toBe('team-b');
    expect(workKeyNamespace('vmop:cluster-thing')).toBeUndefined();
  });
});
