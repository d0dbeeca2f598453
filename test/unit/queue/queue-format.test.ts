import { describe, expect, it } from 'vitest';
import {
  formatKeyDetail,
  formatKeyRows,
  formatStats,
  formatWhen,
} from '../../../src/queue/inspect/format.js';
import { formatDuration, renderTable } from '../../../src/util/table.js';

describe('queue output formatting', () => {
  it('aligns table columns and leaves no trailing blanks', () => {
    expect(
      renderTable(
        ['KEY', 'STATE'],
        [
          ['vm:a/long-name', 'active'],
          ['vm:b/x', 'failed'],
        ],
      ),
    ).toBe(['KEY             STATE', 'vm:a/long-name  active', 'vm:b/x          failed'].join('\n'));
  });

  it('writes durations with at most two units', () => {
    expect(
      [0, 1_400, 59_600, 61_000, 3_600_000, 3_660_000, 90_000_000, 86_400_000].map(formatDuration),
    ).toEqual(['0s', '1s', '1m', '1m1s', '1h', '1h1m', '1d1h', '1d']);
  });

  it('writes times relative to now', () => {
    expect(formatWhen(null, 10_000)).toBe('-');
    expect(formatWhen(10_200, 10_000)).toBe('now');
    expect(formatWhen(15_000, 10_000)).toBe('in 5s');
    expect(formatWhen(10_000, 190_000)).toBe('3m ago');
  });

  it('lists keys with a one-line, shortened last error', () => {
    const table = formatKeyRows(
      [
        {
          key: 'vm:a/b',
          state: 'retrying',
          attempts: 2,
          nextRunAt: 12_000,
          lastError: `line one\nline two ${'x'.repeat(100)}`,
        },
      ],
      10_000,
    ).split('\n');
    expect(table[0]).toBe('KEY     STATE     ATTEMPTS  NEXT RUN  LAST ERROR');
    // Errors are flattened to one line and cut at 80 characters.
    expect(table[1]).toBe(`vm:a/b  retrying  2         in 2s     line one line two ${'x'.repeat(61)}…`);
    expect(formatKeyRows([], 0)).toBe('No keys are queued, running, due again or failing.');
  });

  it('prints stats as a two-column table', () => {
    const text = formatStats(
      {
        queue: 'vmop',
        paused: true,
        keys: { active: 1, waiting: 2, retrying: 0, scheduled: 3, failed: 4 },
        completedRetained: 10,
        throughputPerSecond: 1.5,
        oldestWaitingAgeMs: 90_000,
      },
      1_000_000,
    );
    expect(text.split('\n')).toEqual([
      'QUEUE                 vmop',
      'paused                yes',
      'keys active           1',
      'keys waiting          2',
      'keys retrying         0',
      'keys scheduled        3',
      'keys failed           4',
      'completed (retained)  10',
      'throughput (last 1m)  1.50/s',
      'oldest waiting        1m30s ago',
    ]);
  });

  it('shows a key with its failure, the run queued after the active one, and its recent jobs', () => {
    const text = formatKeyDetail(
      {
        key: 'vm:a/b',
        state: 'active',
        attempts: 2,
        nextRunAt: null,
        lastError: 'boom',
        failure: { attempts: 2, error: 'boom', failedAt: 40_000, terminal: false, jobId: '7' },
        queuedAfterActive: { event: { event: 'SHUTDOWN' }, source: 'add' },
        recentJobs: [
          {
            id: '9',
            state: 'active',
            source: 'follow-up',
            enqueuedAt: 55_000,
            startedAt: 58_000,
            finishedAt: null,
            failedReason: null,
          },
          {
            id: '7',
            state: 'failed',
            source: 'add',
            event: { event: 'RESET' },
            enqueuedAt: 39_000,
            startedAt: 39_800,
            finishedAt: 40_000,
            failedReason: 'boom',
          },
        ],
      },
      60_000,
    );
    expect(text).toContain('failed               20s ago\n');
    expect(text).toContain('queued after active  {"event":"SHUTDOWN"}');
    expect(text.split('Recent jobs (newest first):\n')[1]!.split('\n')).toEqual([
      'JOB  STATE   SOURCE     ENQUEUED  STARTED  FINISHED  EVENT / ERROR',
      '9    active  follow-up  5s ago    2s ago   -         -',
      '7    failed  add        21s ago   20s ago  20s ago   boom',
    ]);
  });
});
