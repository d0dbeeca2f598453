// Keeps a process of a local environment running, as kubelet or systemd would: one that dies
// without being asked is started again after a back-off, and the restart is logged.
import { setTimeout as sleep } from 'node:timers/promises';
import { backoffDelay, type Backoff } from '../queue/backoff.js';
import type { Logger } from '../util/logger.js';
import type { ProcessRef } from '../util/process.js';

/** What a start function returns: a running process that can be told to stop. */
export interface StartedProcess {
  ref: ProcessRef;
  /** Resolves with how the process ended (e.g. "killed by SIGKILL"). */
  exited: Promise<string>;
  hasExited(): boolean;
  /** Sends `signal` unless it has exited. */
  kill(signal: NodeJS.Signals): void;
  stop(graceMs: number): Promise<void>;
}

export interface SupervisedProcess {
  readonly name: string;
  /** The current process (it changes with each restart). */
  readonly ref: ProcessRef;
  /** How often it was started again after it died. */
  readonly restarts: number;
  alive(): boolean;
  /** Sends `signal` to the current process (as a crash would; it is then restarted). */
  kill(signal: NodeJS.Signals): void;
  /** Stops it for good. */
  stop(graceMs: number): Promise<void>;
}

export interface SuperviseOptions {
  logger: Logger;
  backoff?: Backoff;
  /** Called with each new process (e.g. to record where it is). */
  onStart?: (ref: ProcessRef) => void;
  /** A process `start()` already made (e.g. to read its port first): supervised instead of a first start. */
  first?: StartedProcess;
}

const DEFAULT_BACKOFF: Backoff = { baseMs: 1_000, capMs: 30_000 };
/** A process that ran this long before it died starts the back-off from the beginning. */
const STABLE_MS = 60_000;

/** Starts `start()` (unless given `first`) and restarts it whenever it exits unasked. */
export async function superviseProcess(
  name: string,
  start: () => Promise<StartedProcess>,
  options: SuperviseOptions,
): Promise<SupervisedProcess> {
  const { logger } = options;
  const backoff = options.backoff ?? DEFAULT_BACKOFF;
  let current = options.first ?? (await start());
  options.onStart?.(current.ref);
  let restarts = 0;
  let stopping = false;
  let wake: (() => void) | undefined;

  const watch = async () => {
    let failures = 0;
    let startedAt = Date.now();
    while (!stopping) {
      const how = await current.exited;
      if (stopping) return;
      if (Date.now() - startedAt >= STABLE_MS) failures = 0;
      const delay = backoffDelay(++failures, backoff);
      logger.warn(
        { process: name, pid: current.ref.pid, how, restartInMs: delay },
        'process died; restarting it',
      );
      const abort = new AbortController();
      wake = () => abort.abort();
      await sleep(delay, undefined, { signal: abort.signal }).catch(() => undefined);
      if (stopping) return;
      try {
        current = await start();
      } catch (err) {
        logger.warn({ process: name, err: (err as Error).message }, 'restart failed');
        const failed = current.ref;
        current = {
          ref: failed,
          exited: Promise.resolve('did not start'),
          hasExited: () => true,
          kill: () => undefined,
          stop: async () => {},
        };
        continue;
      }
      startedAt = Date.now();
      restarts++;
      options.onStart?.(current.ref);
      logger.info({ process: name, pid: current.ref.pid, restarts }, 'process restarted');
    }
  };
  const watching = watch();

  return {
    name,
    get ref() {
      return current.ref;
    },
    get restarts() {
      return restarts;
    },
    // Its parent knows: no look at a pid that may have been recycled.
    alive: () => !current.hasExited(),
    kill: (signal) => current.kill(signal),
    async stop(graceMs) {
      stopping = true;
      wake?.();
      await current.stop(graceMs);
      await watching;
    },
  };
}
