// The newest configuration wins (src/operator/configuration-claim.ts), on a real Redis, with
// replicas of two configurations started one after the other as a rolling update starts them.
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { claimConfiguration, type ConfigurationClaim } from '../../../src/operator/configuration-claim.js';
import { createLogger } from '../../../src/util/logger.js';
import { eventually } from '../../support/eventually.js';

const TIMING = { pollMs: 100, ttlMs: 800 };

describe('the configuration claim (real Redis)', () => {
  let server: RedisServer;
  let redis: Redis;
  const claims: ConfigurationClaim[] = [];
  /** A replica started now with the configuration `digest`, and what it was told since. */
  const replica = async (digest: string) => {
    const claim = await claimConfiguration({ redis, digest, logger: createLogger('test'), timing: TIMING });
    claims.push(claim);
    const told: boolean[] = [];
    claim.onChange((current) => told.push(current));
    return { claim, told };
  };

  beforeAll(async () => {
    server = await startRedis();
    redis = new Redis(server.url);
  });
  afterEach(async () => {
    for (const claim of claims.splice(0)) claim.stop();
    await redis.flushall();
  });
  afterAll(async () => {
    redis.disconnect();
    await server?.stop();
  });

  it('a rolling update: the old replicas stop taking keys at once, the new one replaced them; once the new ones are gone, the old take over again', async () => {
    const old1 = await replica('old');
    const old2 = await replica('old');
    expect([old1.claim.current, old2.claim.current]).toEqual([true, true]);
    expect(old2.claim.replacedAnother).toBe(false); // a peer, not an upgrade

    const fresh = await replica('new');
    expect(fresh.claim.current).toBe(true);
    expect(fresh.claim.replacedAnother).toBe(true);
    await eventually(() => expect([old1.told, old2.told]).toEqual([[false], [false]]), 5_000, 50);
    // It stays so: the new one renews its claim, the old ones do not take it back.
    await new Promise((resolve) => setTimeout(resolve, 3 * TIMING.ttlMs));
    expect([old1.claim.current, old2.claim.current, fresh.claim.current]).toEqual([false, false, true]);

    // A rollout given up: the new replica is gone, its claim lapses, the old ones carry on.
    fresh.claim.stop();
    await eventually(
      () =>
        expect([old1.told, old2.told]).toEqual([
          [false, true],
          [false, true],
        ]),
      5_000,
      50,
    );
  });

  it('a replica of the old configuration restarted mid-rollout takes nothing back: the configuration is old, not the process', async () => {
    const old = await replica('old');
    const fresh = await replica('new');
    await eventually(() => expect(old.told).toEqual([false]), 5_000, 50);
    // Its container restarted (a failed liveness probe under load): a new process, the old configuration.
    const restartedOld = await replica('old');
    expect(restartedOld.claim.current).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 3 * TIMING.ttlMs));
    expect([old.claim.current, restartedOld.claim.current, fresh.claim.current]).toEqual([
      false,
      false,
      true,
    ]);
    expect([restartedOld.told, fresh.told]).toEqual([[], []]); // the new one never paused
  });

  it('a configuration of before comes back (an upgrade undone): it takes over once the newer one is gone', async () => {
    const first = await replica('a');
    const second = await replica('b');
    await eventually(() => expect(first.told).toEqual([false]), 5_000, 50);
    const back = await replica('a'); // the rollout back to `a` starts its replicas
    expect(back.claim.current).toBe(false); // `b` still runs
    second.claim.stop(); // the rollout back finished: `b`'s replicas are gone
    await eventually(
      () => expect([first.claim.current, back.claim.current]).toEqual([true, true]),
      5_000,
      50,
    );
  });

  it('Redis restarted empty: the claim goes back to the newest configuration', async () => {
    const old = await replica('old');
    const fresh = await replica('new');
    await eventually(() => expect(old.claim.current).toBe(false), 5_000, 50);
    await redis.flushall();
    await new Promise((resolve) => setTimeout(resolve, 5 * TIMING.pollMs));
    expect(await redis.get('vmop:managers:configuration')).toMatch(/^\d+ new$/);
    expect([old.claim.current, fresh.claim.current]).toEqual([false, true]);
  });
});
