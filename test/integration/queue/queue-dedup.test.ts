import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QueueHarness } from './harness.js';

describe('adds of one key collapse, and the earliest requested time wins', () => {
  let harness: QueueHarness;
  beforeAll(async () => {
    harness = await QueueHarness.start();
    await Promise.all([harness.spawnWorker(), harness.spawnWorker()]);
  });
  afterAll(async () => {
    await harness?.stop();
  });

  it('runs a key exactly once more after adds that arrive while it is being handled', async () => {
    const key = 'vm:dedup/busy';
    await harness.setBehaviour(key, { holdUntilReleased: true });
    await harness.producer.add(key);
    await harness.waitFor('the first run to start', async () => (await harness.starts(key)).length === 1);

    for (let i = 0; i < 5; i++) await harness.producer.add(key, { event: { event: 'BALLOON_CHANGE', n: i } });
    const detail = await harness.inspector.show(key);
    expect(detail.state).toBe('active');
    // The run after the active one carries the last add's event.
    expect(detail.queuedAfterActive?.event).toEqual({ event: 'BALLOON_CHANGE', n: 4 });

    await harness.release(key);
    await harness.waitForIdle();
    const runs = await harness.runs(key);
    expect(runs).toHaveLength(2);
    expect(runs[1]!.startSeq).toBeGreaterThan(runs[0]!.seq);
  });

  it('runs a burst of adds to a waiting key once', async () => {
    const key = 'vm:dedup/burst';
    await harness.inspector.pause();
    await Promise.all(Array.from({ length: 20 }, (_, i) => harness.producer.add(key, { event: { n: i } })));
    const waiting = await harness.inspector.list(['waiting']);
    expect(waiting.map((row) => row.key)).toEqual([key]);
    expect((await harness.inspector.stats()).keys.waiting).toBe(1);
    await harness.inspector.resume();
    await harness.waitForIdle();
    expect(await harness.runs(key)).toHaveLength(1);
  });

  it('lets an earlier delayed add win over a later one, and one run satisfy both', async () => {
    const key = 'vm:dedup/delayed';
    await harness.producer.add(key, { delayMs: 60_000 });
    const [later] = await harness.inspector.list(['scheduled']);
    await harness.producer.add(key, { delayMs: 300 });
    const [earlier] = await harness.inspector.list(['scheduled']);
    expect(later?.key).toBe(key);
    expect(earlier!.nextRunAt!).toBeLessThan(later!.nextRunAt! - 50_000);

    await harness.waitForIdle();
    expect(await harness.runs(key)).toHaveLength(1);
    expect(await harness.inspector.list()).toEqual([]);
  });

  it('runs a key that waits delayed at once when it is added without delay', async () => {
    const key = 'vm:dedup/now';
    await harness.producer.add(key, { delayMs: 60_000 });
    const mark = await harness.mark();
    await harness.producer.add(key);
    await harness.waitForIdle();
    const runs = await harness.runs(key);
    expect(runs).toHaveLength(1);
    expect(runs[0]!.startSeq).toBeGreaterThan(mark);
  });

  it('runs a key again no earlier than the requeueAfter its handler returned', async () => {
    const key = 'vm:dedup/requeue';
    await harness.setBehaviour(key, { requeueAfter: 400, requeueTimes: 1 });
    await harness.producer.add(key);
    await harness.waitFor('the requeued run', async () => (await harness.runs(key)).length === 2);
    const [first, second] = await harness.runs(key);
    const secondStart = (await harness.starts(key))[1]!;
    expect(secondStart.t - first!.t).toBeGreaterThanOrEqual(400);
    expect(second!.outcome).toBe('success');
    await harness.waitForIdle();
    expect(await harness.runs(key)).toHaveLength(2);
  });
});
