import { z } from 'zod';
import type { FailureRecord } from '../key-state.js';

/** What an operator sees per key; precedence is the order listed. */
export const KEY_STATES = ['active', 'waiting', 'retrying', 'scheduled', 'failed'] as const;
export const KeyStateNameSchema = z.enum(KEY_STATES);
export type KeyStateName = z.infer<typeof KeyStateNameSchema>;

export const KeyRowSchema = z.object({
  key: z.string(),
  state: KeyStateNameSchema,
  /** Consecutive failed runs (0 when the last run succeeded). */
  attempts: z.number().int().nonnegative(),
  /** Epoch ms of the next requested run; null when none is pending or it runs as soon as a worker is free. */
  nextRunAt: z.number().nullable(),
  lastError: z.string().nullable(),
});
export type KeyRow = z.infer<typeof KeyRowSchema>;

export interface QueueSnapshot {
  /** Keys of active jobs. */
  active: Iterable<string>;
  /** Keys of waiting jobs. */
  waiting: Iterable<string>;
  /** Pending follow-ups: key → due time. */
  followUps: ReadonlyMap<string, number>;
  failures: ReadonlyMap<string, FailureRecord>;
}

/** One row per key that is queued, running, due again or failing, sorted by key. */
export function foldKeyRows(snapshot: QueueSnapshot): KeyRow[] {
  const active = new Set(snapshot.active);
  const waiting = new Set(snapshot.waiting);
  const keys = new Set([...active, ...waiting, ...snapshot.followUps.keys(), ...snapshot.failures.keys()]);
  return [...keys].sort().map((key) => {
    const failure = snapshot.failures.get(key);
    const followUpAt = snapshot.followUps.get(key);
    return {
      key,
      state: stateOf(active.has(key), waiting.has(key), followUpAt !== undefined, failure),
      attempts: failure?.attempts ?? 0,
      nextRunAt: followUpAt ?? null,
      lastError: failure?.error ?? null,
    };
  });
}

function stateOf(
  active: boolean,
  waiting: boolean,
  followUp: boolean,
  failure: FailureRecord | undefined,
): KeyStateName {
  if (active) return 'active';
  if (waiting) return 'waiting';
  if (followUp) return failure ? 'retrying' : 'scheduled';
  return 'failed';
}

/** Keys per state. */
export function countByState(rows: KeyRow[]): Record<KeyStateName, number> {
  const counts = Object.fromEntries(KEY_STATES.map((state) => [state, 0])) as Record<KeyStateName, number>;
  for (const row of rows) counts[row.state] += 1;
  return counts;
}
