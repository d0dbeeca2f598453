import type { JobsOptions } from 'bullmq';

/**
 * How long finished jobs stay inspectable. Failed jobs are also removed by the worker when a later
 * run of the same key fails again or succeeds, so the failed set shows each failing key once.
 */
export const RETENTION = {
  completed: { age: 60 * 60, count: 1000 },
  failed: { age: 7 * 24 * 60 * 60, count: 10_000 },
} as const;

/**
 * One job per key at a time: adds to a waiting key collapse into it, and an add while the key is
 * active is kept (last one wins) and becomes one more job when the active one finishes.
 */
export function keyJobOptions(key: string): JobsOptions {
  return {
    deduplication: { id: key, keepLastIfActive: true },
    removeOnComplete: RETENTION.completed,
    removeOnFail: RETENTION.failed,
  };
}
