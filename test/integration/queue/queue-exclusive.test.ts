import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LedgerEvent } from './ledger.js';
import { QueueHarness } from './harness.js';

const KEYS = Array.from({ length: 60 }, (_, i) => `vm:stress/vm-${i}`);
const ADDS = 3000;

describe('work queue across three worker processes', () => {
  let harness: QueueHarness;
  beforeAll(async () => {
    harness = await QueueHarness.start();
  });
  afterAll(async () => {
    await harness?.stop();
  });

  it('never runs one key twice at once, and runs every key after its last add', async () => {
    await Promise.all([0, 1, 2].map(() => harness.spawnWorker({ concurrency: 4, followUpPollMs: 50 })));
    for (const key of KEYS) await harness.setBehaviour(key, { jitterMs: 4 });

    // Adds in small concurrent bursts, so they land while keys wait, run, or are due again later.
    const lastAddMark = new Map<string, number>();
    for (let sent = 0; sent < ADDS;) {
      const burst = Array.from({ length: 1 + Math.floor(Math.random() * 20) }, () => {
        const key = KEYS[Math.floor(Math.random() * KEYS.length)]!;
        const delayMs = Math.random() < 0.1 ? Math.floor(Math.random() * 30) : 0;
        return { key, delayMs };
      });
      await Promise.all(
        burst.map(async ({ key, delayMs }) => {
          const mark = await harness.mark();
          await harness.producer.add(key, delayMs > 0 ? { delayMs } : {});
          lastAddMark.set(key, Math.max(mark, lastAddMark.get(key) ?? 0));
        }),
      );
      sent += burst.length;
      if (Math.random() < 0.3) await new Promise((r) => setTimeout(r, Math.random() * 10));
    }
    await harness.waitForIdle();

    const events = await harness.events();
    const runsByKey = new Map<string, LedgerEvent[]>();
    for (const end of events.filter((e) => e.type === 'end')) {
      runsByKey.set(end.key!, [...(runsByKey.get(end.key!) ?? []), end]);
    }
    const starts = events.filter((e) => e.type === 'start').length;
    expect(starts).toBe([...runsByKey.values()].reduce((n, runs) => n + runs.length, 0));

    const overlaps: string[] = [];
    const unserved: string[] = [];
    for (const [key, lastMark] of lastAddMark) {
      const runs = (runsByKey.get(key) ?? []).sort((a, b) => a.startSeq! - b.startSeq!);
      for (let i = 1; i < runs.length; i++) {
        if (runs[i]!.startSeq! < runs[i - 1]!.seq)
          overlaps.push(`${key}: run ${i} started before run ${i - 1} ended`);
      }
      if (!runs.some((run) => run.startSeq! > lastMark)) unserved.push(key);
    }
    expect(overlaps).toEqual([]);
    expect(unserved).toEqual([]);
    const pids = new Set(events.filter((e) => e.type === 'start').map((e) => e.pid));
    expect(pids.size).toBe(3);
    console.log(`${ADDS} adds of ${KEYS.length} keys → ${starts} runs across ${pids.size} processes`);
  });
});
