import type { Logger } from '../util/logger.js';
import type { KeyState } from './key-state.js';

export interface FollowUpPump {
  /** Tells the pump that this process just requested a follow-up at `dueAt`, so it need not wait for its poll. */
  wake(dueAt: number): void;
  stop(): Promise<void>;
}

const CLAIM_LIMIT = 500;
/** A pump that dies after claiming gives its claims back after this long. */
const LEASE_MS = 30_000;

/**
 * Moves follow-ups whose time has come into the queue. Every worker process runs one; claims keep
 * two pumps from enqueueing the same entry, and polling (at most `pollMs` apart) picks up
 * follow-ups requested by other processes.
 */
export function startFollowUpPump(opts: {
  state: KeyState;
  enqueue: (keys: string[]) => Promise<void>;
  pollMs: number;
  logger: Logger;
}): FollowUpPump {
  const { state, enqueue, pollMs, logger } = opts;
  let stopped = false;
  let sleepUntil = 0;
  // A wake that arrives while the pump is claiming (not sleeping) shortens its next sleep.
  let requestedWake = Infinity;
  let interrupt: (() => void) | undefined;

  const sleep = (until: number) =>
    new Promise<void>((resolve) => {
      sleepUntil = until;
      const timer = setTimeout(done, Math.max(0, until - Date.now()));
      function done() {
        clearTimeout(timer);
        interrupt = undefined;
        resolve();
      }
      interrupt = done;
    });

  const loop = async () => {
    while (!stopped) {
      let wakeAt = Date.now() + pollMs;
      requestedWake = Infinity;
      try {
        const now = Date.now();
        const leaseUntil = now + LEASE_MS;
        const { keys, nextDueAt } = await state.claimDueFollowUps({ now, limit: CLAIM_LIMIT, leaseUntil });
        if (keys.length > 0) {
          await enqueue(keys);
          await state.releaseFollowUps(keys, leaseUntil);
          continue;
        }
        if (nextDueAt !== undefined) wakeAt = Math.min(wakeAt, nextDueAt);
      } catch (err) {
        logger.warn({ err }, 'follow-up pump could not move due keys; retrying');
      }
      if (!stopped) await sleep(Math.min(wakeAt, requestedWake));
    }
  };
  const running = loop();

  return {
    wake(dueAt) {
      requestedWake = Math.min(requestedWake, dueAt);
      if (dueAt < sleepUntil) interrupt?.();
    },
    async stop() {
      stopped = true;
      interrupt?.();
      await running;
    },
  };
}
