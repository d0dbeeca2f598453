// The migration limits on a real Redis, asked by two clients at once as two manager replicas would.
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { migrationSlots, type MigrationLimits } from '../../../src/operator/migration-slots.js';

describe('migration slots (real Redis, two replicas)', () => {
  let server: RedisServer;
  let replicas: Redis[];
  const LEASES = { runningMs: 60_000, waitingMs: 30_000 };
  const slotsOf = (limits: MigrationLimits, leases = LEASES) =>
    replicas.map((redis) => migrationSlots(redis, limits, leases));

  beforeAll(async () => {
    server = await startRedis();
    replicas = [new Redis(server.url), new Redis(server.url)];
  });
  afterEach(async () => {
    await replicas[0]!.flushall();
  });
  afterAll(async () => {
    for (const redis of replicas) redis.disconnect();
    await server?.stop();
  });

  it('three migrations asked at once with a limit of 1: one runs, the others wait and get the slot in the order they asked', async () => {
    const [one, two] = slotsOf({ perCluster: 1, outboundPerNode: 2 });
    // Asked one after the other (their order), then all again at once from both replicas.
    const asked = [
      ['vm:ns/a', 'm1', 'node-1'],
      ['vm:ns/b', 'm2', 'node-1'],
      ['vm:ns/c', 'm3', 'node-2'],
    ] as const;
    const first = [];
    for (const [vm, id, node] of asked) first.push(await one!.take(vm, id, node));
    expect(first.map((answer) => answer.granted)).toEqual([true, false, false]);
    expect(first[2]).toEqual({
      granted: false,
      waiting:
        'waiting for a free migration slot: 1 of 1 under way in the cluster, 0 of 2 from node-2; 1 asked before',
    });
    const again = await Promise.all(
      asked.map(([vm, id, node], i) => (i % 2 ? two! : one!).take(vm, id, node)),
    );
    expect(again.map((answer) => answer.granted)).toEqual([true, false, false]); // a still holds it
    await two!.release('vm:ns/a', 'm1');
    // c asks first now, but b asked before it: b's turn.
    expect((await one!.take('vm:ns/c', 'm3', 'node-2')).granted).toBe(false);
    expect((await two!.take('vm:ns/b', 'm2', 'node-1')).granted).toBe(true);
    await one!.release('vm:ns/b', 'm2');
    expect((await two!.take('vm:ns/c', 'm3', 'node-2')).granted).toBe(true);
  });

  it('at most N outbound per node: a VM on another node goes ahead of one that waits for its own node', async () => {
    const [one] = slotsOf({ perCluster: 5, outboundPerNode: 1 });
    expect((await one!.take('vm:ns/a', 'm1', 'node-1')).granted).toBe(true);
    expect(await one!.take('vm:ns/b', 'm2', 'node-1')).toMatchObject({
      granted: false,
      waiting: expect.stringContaining('1 of 1 from node-1'),
    });
    expect((await one!.take('vm:ns/c', 'm3', 'node-2')).granted).toBe(true);
    // A release of another migration's id (an old one of the VM's) frees nothing.
    await one!.release('vm:ns/a', 'm0');
    expect((await one!.take('vm:ns/b', 'm2', 'node-1')).granted).toBe(false);
  });

  it('a slot whose holder never let go lapses with its lease; one that stopped asking loses its place', async () => {
    const [one] = slotsOf({ perCluster: 1, outboundPerNode: 1 }, { runningMs: 300, waitingMs: 300 });
    expect((await one!.take('vm:ns/a', 'm1', 'node-1')).granted).toBe(true);
    expect((await one!.take('vm:ns/b', 'm2', 'node-1')).granted).toBe(false); // b asks once, then no more
    await sleep(400);
    expect((await one!.take('vm:ns/c', 'm3', 'node-1')).granted).toBe(true);
  });
});
