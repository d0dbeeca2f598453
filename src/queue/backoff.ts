import { z } from 'zod';

export const BackoffSchema = z
  .object({ baseMs: z.number().positive(), capMs: z.number().positive() })
  .refine((b) => b.capMs >= b.baseMs, 'backoff capMs must be at least baseMs');
export type Backoff = z.infer<typeof BackoffSchema>;

export const DEFAULT_BACKOFF: Backoff = { baseMs: 100, capMs: 5 * 60_000 };

/** Delay before the retry that follows the `failures`-th consecutive failure (1-based): base doubling, capped. */
export function backoffDelay(failures: number, backoff: Backoff): number {
  const exponent = Math.max(0, failures - 1);
  // 2 ** 1024 is Infinity; Math.min then yields the cap, so long failure streaks stay well-defined.
  return Math.min(backoff.baseMs * 2 ** exponent, backoff.capMs);
}
