import { z } from 'zod';

export const HandlerResultSchema = z
  .object({
    /** Run the key again after this many ms, unless an earlier run is requested. */
    requeueAfter: z.number().nonnegative().optional(),
  })
  .optional();
export type HandlerResult = z.infer<typeof HandlerResultSchema> | void;

/**
 * Reconciles one key. Gets the key, never the payload that caused the run (level-triggered).
 * `attempt()` counts runs since the key last succeeded (1 when it did; it reads Redis, so a
 * handler that does not need it does not wait for it); `signal` aborts when the key's lock is lost
 * or the worker shuts down past its timeout.
 */
export type KeyHandler = (
  key: string,
  ctx: { attempt(): Promise<number>; signal: AbortSignal },
) => Promise<HandlerResult>;
