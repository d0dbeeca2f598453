import { formatDuration, renderTable } from '../../util/table.js';
import type { KeyRow } from './key-rows.js';
import type { KeyDetail, Stats } from './inspector.js';

/** A time relative to now: `in 5s`, `3m ago`, `now`. */
export function formatWhen(at: number | null, now: number): string {
  if (at === null) return '-';
  const delta = at - now;
  if (Math.abs(delta) < 500) return 'now';
  return delta > 0 ? `in ${formatDuration(delta)}` : `${formatDuration(delta)} ago`;
}

const ERROR_WIDTH = 80;

function oneLine(text: string | null): string {
  if (text === null) return '-';
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > ERROR_WIDTH ? `${flat.slice(0, ERROR_WIDTH - 1)}…` : flat;
}

export function formatKeyRows(rows: KeyRow[], now: number): string {
  if (rows.length === 0) return 'No keys are queued, running, due again or failing.';
  return renderTable(
    ['KEY', 'STATE', 'ATTEMPTS', 'NEXT RUN', 'LAST ERROR'],
    rows.map((row) => [
      row.key,
      row.state,
      String(row.attempts),
      row.state === 'waiting' ? 'now' : formatWhen(row.nextRunAt, now),
      oneLine(row.lastError),
    ]),
  );
}

export function formatStats(stats: Stats, now: number): string {
  const keyCounts = Object.entries(stats.keys).map(([state, count]) => [`keys ${state}`, String(count)]);
  return renderTable(
    ['QUEUE', stats.queue],
    [
      ['paused', stats.paused ? 'yes' : 'no'],
      ...keyCounts,
      ['completed (retained)', String(stats.completedRetained)],
      ['throughput (last 1m)', `${stats.throughputPerSecond.toFixed(2)}/s`],
      [
        'oldest waiting',
        stats.oldestWaitingAgeMs === null ? '-' : formatWhen(now - stats.oldestWaitingAgeMs, now),
      ],
    ],
  );
}

export function formatKeyDetail(detail: KeyDetail, now: number): string {
  const summary = renderTable(
    ['KEY', detail.key],
    [
      ['state', detail.state],
      ['attempts', String(detail.attempts)],
      ['next run', formatWhen(detail.nextRunAt, now)],
      ['last error', detail.lastError ?? '-'],
      [
        'failed',
        detail.failure
          ? `${formatWhen(detail.failure.failedAt, now)}${detail.failure.terminal ? ' (terminal)' : ''}`
          : '-',
      ],
      ['queued after active', detail.queuedAfterActive ? eventText(detail.queuedAfterActive.event) : '-'],
    ],
  );
  if (detail.recentJobs.length === 0) return `${summary}\n\nNo recent jobs retained for this key.`;
  const jobs = renderTable(
    ['JOB', 'STATE', 'SOURCE', 'ENQUEUED', 'STARTED', 'FINISHED', 'EVENT / ERROR'],
    detail.recentJobs.map((job) => [
      job.id,
      job.state,
      job.source,
      formatWhen(job.enqueuedAt, now),
      formatWhen(job.startedAt, now),
      formatWhen(job.finishedAt, now),
      job.failedReason ? oneLine(job.failedReason) : eventText(job.event),
    ]),
  );
  return `${summary}\n\nRecent jobs (newest first):\n${jobs}`;
}

function eventText(event: unknown): string {
  return event === undefined ? '-' : oneLine(JSON.stringify(event));
}
