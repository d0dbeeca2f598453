import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { harnessPerTest } from './harness.js';

describe('graceful shutdown of workers', () => {
  const startHarness = harnessPerTest();

  it('stops taking keys, lets the active handler finish, and exits cleanly', async () => {
    const h = await startHarness();
    const worker = await h.spawnWorker({ shutdownTimeoutMs: 30_000 });
    const busy = 'vm:shutdown/busy';
    const late = 'vm:shutdown/late';
    await h.setBehaviour(busy, { holdUntilReleased: true });
    await h.producer.add(busy);
    await h.waitFor('the handler to start', async () => (await h.starts(busy)).length === 1);

    const exitCode = worker.terminate();
    await h.waitFor('the worker to begin closing', async () =>
      (await h.events()).some((e) => e.type === 'closing'),
    );
    await h.producer.add(late);
    await h.release(busy);
    expect(await exitCode).toBe(0);

    expect(await h.runs(busy)).toMatchObject([{ outcome: 'success' }]);
    expect((await h.inspector.show(busy)).recentJobs[0]).toMatchObject({ state: 'completed' });
    expect(await h.starts(late)).toEqual([]);
    expect(await h.inspector.list()).toMatchObject([{ key: late, state: 'waiting' }]);
  });

  it('aborts a handler that outlives the shutdown timeout and hands its key back to the queue', async () => {
    const h = await startHarness();
    const worker = await h.spawnWorker({ shutdownTimeoutMs: 300 });
    const stuck = 'vm:shutdown/stuck';
    await h.setBehaviour(stuck, { holdUntilReleased: true });
    await h.producer.add(stuck);
    await h.waitFor('the handler to start', async () => (await h.starts(stuck)).length === 1);

    expect(await worker.terminate()).toBe(0);
    expect(await h.runs(stuck)).toMatchObject([{ outcome: 'aborted' }]);
    // Not a failure of the key: it is due again at once, for any other replica.
    expect(await h.inspector.list()).toMatchObject([{ key: stuck, state: 'scheduled', attempts: 0 }]);
  });

  it('logs a handler that runs long, with its key, once: a hung one holds its key', async () => {
    const h = await startHarness();
    const worker = await h.spawnWorker({ longRunWarnMs: 200 });
    const slow = 'vm:shutdown/slow';
    await h.setBehaviour(slow, { holdUntilReleased: true });
    await h.producer.add(slow);
    const said = () =>
      worker
        .logs()
        .split('\n')
        .filter((line) => line.includes('a handler has run long'));
    await h.waitFor('the long run to be logged', async () => said().length > 0);
    await sleep(300); // more checks pass: still one line
    expect(said()).toHaveLength(1);
    expect(JSON.parse(said()[0]!)).toMatchObject({ key: slow, level: 40 });
    await h.release(slow);
    expect(await worker.terminate()).toBe(0);
  });
});
