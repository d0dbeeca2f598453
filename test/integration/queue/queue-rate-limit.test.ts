import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QueueHarness } from './harness.js';

describe('global rate limit', () => {
  let harness: QueueHarness;
  beforeAll(async () => {
    harness = await QueueHarness.start();
  });
  afterAll(async () => {
    await harness?.stop();
  });

  it('limits handler starts per second across all worker processes together', async () => {
    // One handler at a time per process, each busy 0.6 s: a process cannot take both starts of a
    // window, so both processes take part (one took all six once, proving nothing across them).
    // Per-process limits would still end by ~1.2 s (0, 0.6, 1.0 in each process).
    await Promise.all([0, 1].map(() => harness.spawnWorker({ concurrency: 1, rateLimit: { perSecond: 2 } })));
    const keys = Array.from({ length: 6 }, (_, i) => `vm:rate/vm-${i}`);
    for (const key of keys) await harness.setBehaviour(key, { sleepMs: 600 });
    await harness.producer.addMany(keys);
    await harness.waitForIdle();

    const starts = (await harness.events()).filter((e) => e.type === 'start').map((e) => e.t);
    expect(starts).toHaveLength(6);
    expect(new Set((await harness.events()).map((e) => e.pid)).size).toBe(2);
    // 6 starts at 2 per second need three one-second windows: at least two seconds from first to
    // last (less some slack for where the first window began). Per-process limits would allow 4/s.
    expect(Math.max(...starts) - Math.min(...starts)).toBeGreaterThanOrEqual(1500);
  });
});
