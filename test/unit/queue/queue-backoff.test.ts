import { describe, expect, it } from 'vitest';
import { backoffDelay, BackoffSchema, DEFAULT_BACKOFF } from '../../../src/queue/backoff.js';

describe('backoffDelay', () => {
  it('doubles from the base per consecutive failure and stops at the cap', () => {
    const backoff = { baseMs: 100, capMs: 1000 };
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, backoff))).toEqual([100, 200, 400, 800, 1000, 1000]);
  });

  it('defaults to about 100 ms doubling to 5 minutes, and survives very long failure streaks', () => {
    expect(backoffDelay(1, DEFAULT_BACKOFF)).toBe(100);
    expect(backoffDelay(20, DEFAULT_BACKOFF)).toBe(300_000);
    expect(backoffDelay(5000, DEFAULT_BACKOFF)).toBe(300_000);
  });

  it('rejects a cap below the base', () => {
    expect(BackoffSchema.safeParse({ baseMs: 500, capMs: 100 }).success).toBe(false);
  });
});
