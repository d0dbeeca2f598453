import { describe, expect, it } from 'vitest';
import { RedisUrlSchema, redisOptionsOf, redisWhere } from '../../../src/queue/connection.js';

describe('Redis URLs', () => {
  it('a plain URL is passed to ioredis as it is', () => {
    expect(redisOptionsOf('redis://runner:s3cret@redis:6379/0')).toEqual({
      url: 'redis://runner:s3cret@redis:6379/0',
    });
    expect(redisWhere('redis://runner:s3cret@redis:6379/0')).toBe('redis:6379');
  });

  it('a Sentinel URL names the Sentinels, the master, and the credentials of both', () => {
    const url = 'redis+sentinel://vmop-runner:p%40ss@s-0:26379,s-1:26380,s-2/vmop?sentinelPassword=watch';
    expect(RedisUrlSchema.safeParse(url).success).toBe(true);
    expect(redisOptionsOf(url)).toEqual({
      sentinels: [
        { host: 's-0', port: 26379 },
        { host: 's-1', port: 26380 },
        { host: 's-2', port: 26379 },
      ],
      name: 'vmop',
      username: 'vmop-runner',
      password: 'p@ss',
      sentinelPassword: 'watch',
      connectTimeout: 3000,
    });
    // No password in what is logged.
    expect(redisWhere(url)).toBe('vmop of Sentinels s-0:26379,s-1:26380,s-2:26379');
  });

  it('a Sentinel URL without a master or with a bad port is refused with a message', () => {
    expect(RedisUrlSchema.safeParse('redis+sentinel://s-0:26379').error?.issues[0]?.message).toBe(
      'a Redis URL looks like redis://host:port or redis+sentinel://host:port,host:port/master',
    );
    expect(() => redisOptionsOf('redis+sentinel://s-0:none/vmop')).toThrow(
      'a Sentinel address looks like host:port, not s-0:none',
    );
  });
});
