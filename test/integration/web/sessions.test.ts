// GUI logins in a real Redis, with short limits: a session ends when unused for its idle time,
// and at its maximum age however much it is used; Redis holds no usable session id.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { redisBed } from '../../support/redis-bed.js';
import { sessionStore } from '../../../src/web/sessions.js';

const person = { user: 'alice', groups: ['users'] };

describe('web GUI sessions, in a real Redis', () => {
  let redis: Redis;
  const bed = redisBed();
  beforeAll(() => {
    ({ redis } = bed);
  });

  it('ends a session unused for its idle time; use keeps it', async () => {
    const sessions = sessionStore(redis, { idleSeconds: 2, maxSeconds: 60 });
    const { id } = await sessions.create(person);
    expect(JSON.stringify(await redis.keys('*'))).not.toContain(id);
    for (let use = 0; use < 3; use++) {
      await sleep(1_200); // within the idle time, each read renews it
      expect((await sessions.read(id))?.person).toEqual(person);
    }
    await sleep(2_500);
    expect(await sessions.read(id)).toBeUndefined();
  });

  it('ends a session at its maximum age, however often it is used', async () => {
    const sessions = sessionStore(redis, { idleSeconds: 2, maxSeconds: 3 });
    const { id } = await sessions.create(person);
    const alive: boolean[] = [];
    for (let use = 0; use < 5; use++) {
      await sleep(1_000);
      alive.push((await sessions.read(id)) !== undefined);
    }
    expect(alive.slice(0, 2)).toEqual([true, true]);
    expect(alive.at(-1)).toBe(false);
  });
});
