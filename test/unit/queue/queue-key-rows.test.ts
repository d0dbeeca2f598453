import { describe, expect, it } from 'vitest';
import { countByState, foldKeyRows } from '../../../src/queue/inspect/key-rows.js';
import type { FailureRecord } from '../../../src/queue/key-state.js';

const failure = (attempts: number, terminal: boolean): FailureRecord => ({
  attempts,
  terminal,
  error: `boom ${attempts}`,
  failedAt: 1000,
});

describe('foldKeyRows', () => {
  const rows = foldKeyRows({
    active: ['vm:a/running'],
    waiting: ['vm:a/queued', 'vm:a/running'],
    followUps: new Map([
      ['vm:a/later', 5000],
      ['vm:a/retry', 6000],
      ['vm:a/running', 7000],
    ]),
    failures: new Map([
      ['vm:a/retry', failure(3, false)],
      ['vm:a/broken', failure(1, true)],
    ]),
  });

  it('gives each key one row with the state that matters most', () => {
    expect(rows).toEqual([
      { key: 'vm:a/broken', state: 'failed', attempts: 1, nextRunAt: null, lastError: 'boom 1' },
      { key: 'vm:a/later', state: 'scheduled', attempts: 0, nextRunAt: 5000, lastError: null },
      { key: 'vm:a/queued', state: 'waiting', attempts: 0, nextRunAt: null, lastError: null },
      { key: 'vm:a/retry', state: 'retrying', attempts: 3, nextRunAt: 6000, lastError: 'boom 3' },
      { key: 'vm:a/running', state: 'active', attempts: 0, nextRunAt: 7000, lastError: null },
    ]);
  });

  it('counts keys per state', () => {
    expect(countByState(rows)).toEqual({ active: 1, waiting: 1, retrying: 1, scheduled: 1, failed: 1 });
  });
});
