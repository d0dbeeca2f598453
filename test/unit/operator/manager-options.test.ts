import { describe, expect, it } from 'vitest';
import { ManagerOptions } from '../../../src/operator/manager.js';

describe("the manager's options", () => {
  it('take a Sentinel URL naming several Sentinels (the chart gives one in Sentinel mode)', () => {
    const redisUrl =
      'redis+sentinel://vmop-manager:pw@r-0.h.ns.svc:26379,r-1.h.ns.svc:26379,r-2.h.ns.svc:26379/vmop?sentinelPassword=s';
    expect(ManagerOptions.parse({ redisUrl }).redisUrl).toBe(redisUrl);
  });

  it('refuse what is no Redis URL, saying what one looks like', () => {
    expect(() => ManagerOptions.parse({ redisUrl: 'localhost:6379' })).toThrow(/redis:\/\/host:port/);
  });
});
