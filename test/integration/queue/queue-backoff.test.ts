import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LedgerEvent } from './ledger.js';
import { QueueHarness } from './harness.js';

const BACKOFF = { baseMs: 500, capMs: 2000 };

/** Time from the end of each run to the start of the next. */
function gaps(starts: LedgerEvent[], ends: LedgerEvent[]): number[] {
  return ends.slice(0, -1).map((end, i) => starts[i + 1]!.t - end.t);
}

describe('failing keys back off per key', () => {
  let harness: QueueHarness;
  beforeAll(async () => {
    harness = await QueueHarness.start();
    // One handler slot: if a backing-off key held it, every other key would wait behind it.
    await harness.spawnWorker({ concurrency: 1, backoff: BACKOFF });
  });
  afterAll(async () => {
    await harness?.stop();
  });

  it('doubles the delay per failure up to the cap, resets it on success, and never delays other keys', async () => {
    const flaky = 'vm:backoff/flaky';
    await harness.setBehaviour(flaky, { failTimes: 4 });
    await harness.producer.add(flaky);
    // The worker records the failure just after the handler's end reached the ledger: wait for both.
    await harness.waitFor('the first failure', async () => (await harness.runs(flaky)).length === 1);
    const [retrying] = await harness.waitFor('the first failure in the queue', async () => {
      const rows = await harness.inspector.list(['retrying']);
      return rows.length > 0 ? rows : undefined;
    });
    expect(retrying).toMatchObject({ key: flaky, attempts: 1, lastError: `failure 1 of ${flaky}` });

    const others = Array.from({ length: 10 }, (_, i) => `vm:backoff/other-${i}`);
    await harness.producer.addMany(others);
    await harness.waitFor('the fifth run', async () => (await harness.runs(flaky)).length === 5);

    const runs = await harness.runs(flaky);
    const starts = await harness.starts(flaky);
    expect(runs.map((r) => [r.attempt, r.outcome])).toEqual([
      [1, 'error'],
      [2, 'error'],
      [3, 'error'],
      [4, 'error'],
      [5, 'success'],
    ]);
    const [g1, g2, g3, g4] = gaps(starts, runs);
    // Each retry waits at least base·2^(n-1), capped; and the waits grow until the cap.
    expect(g1).toBeGreaterThanOrEqual(500);
    expect(g2).toBeGreaterThanOrEqual(1000);
    expect(g3).toBeGreaterThanOrEqual(2000);
    expect(g4).toBeGreaterThanOrEqual(2000);
    expect(g1).toBeLessThan(g2!);
    expect(g2).toBeLessThan(g3!);

    // All other keys went through the single slot while the flaky key waited for its first retry.
    const secondStart = starts[1]!.seq;
    for (const key of others) {
      const [run] = await harness.runs(key);
      expect(run?.seq, key).toBeLessThan(secondStart);
    }

    // Success forgets the failures: the next failure waits the base delay again.
    await harness.setBehaviour(flaky, { failTimes: 1 });
    await harness.producer.add(flaky);
    await harness.waitFor('the run after the reset', async () => (await harness.runs(flaky)).length === 7);
    const after = await harness.runs(flaky);
    expect(after.slice(5).map((r) => [r.attempt, r.outcome])).toEqual([
      [1, 'error'],
      [2, 'success'],
    ]);
    const [, , , , , g6] = gaps(await harness.starts(flaky), after);
    expect(g6).toBeGreaterThanOrEqual(500);
    expect(g6).toBeLessThan(g3!);
    await harness.waitForIdle();
    expect(await harness.inspector.list()).toEqual([]);
  });

  it('does not retry a TerminalError and keeps the key visible as failed with its message', async () => {
    const broken = 'vm:backoff/broken';
    await harness.setBehaviour(broken, { terminal: true });
    await harness.producer.add(broken);
    await harness.waitFor('the terminal failure', async () => (await harness.runs(broken)).length === 1);
    const detail = await harness.waitFor('the terminal failure in the queue', async () => {
      const shown = await harness.inspector.show(broken);
      return shown.state === 'failed' ? shown : undefined;
    });
    expect(detail).toMatchObject({
      state: 'failed',
      attempts: 1,
      nextRunAt: null,
      lastError: `terminal failure of ${broken}`,
      failure: { terminal: true },
    });
    expect(detail.recentJobs[0]).toMatchObject({
      state: 'failed',
      failedReason: `terminal failure of ${broken}`,
    });

    // Meanwhile a retried key needs two backoff delays (0.5 s + 1 s): time in which a retry would show.
    const flaky = 'vm:backoff/second-flaky';
    await harness.setBehaviour(flaky, { failTimes: 2 });
    await harness.producer.add(flaky);
    await harness.waitFor('the retried key to succeed', async () => (await harness.runs(flaky)).length === 3);
    expect(await harness.runs(broken)).toHaveLength(1);

    // Retrying it by hand after the cause is fixed clears the failure and its failed job.
    await harness.setBehaviour(broken, {});
    await harness.inspector.retry([broken]);
    await harness.waitFor('the manual retry', async () => (await harness.runs(broken)).length === 2);
    await harness.waitForIdle();
    expect(await harness.inspector.list()).toEqual([]);
    expect(await harness.inspector.bullQueue.getFailedCount()).toBe(0);
  });
});
