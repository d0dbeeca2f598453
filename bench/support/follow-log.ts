import { open } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

export interface FollowedLog {
  /** Each whole line, with the performance.now() time the read that brought it ended. */
  readonly arrivals: ReadonlyArray<{ at: number; line: string }>;
  stop(): Promise<void>;
}

/**
 * Polls a growing log file (a guest's console log on its runner data volume) and notes when each
 * line arrived, as this machine sees it; a log the runner trimmed is read from its start again.
 */
export function followLog(file: string, intervalMs = 1): FollowedLog {
  const arrivals: Array<{ at: number; line: string }> = [];
  let offset = 0;
  let partial = '';
  let stopped = false;
  const polling = (async () => {
    const handle = await open(file, 'r');
    try {
      while (!stopped) {
        const { size } = await handle.stat();
        if (size < offset) offset = 0; // trimmed by the runner
        if (size > offset) {
          const buffer = Buffer.alloc(size - offset);
          await handle.read(buffer, 0, buffer.length, offset);
          offset = size;
          const lines = (partial + buffer.toString('utf8')).split('\n');
          partial = lines.pop()!;
          const at = performance.now();
          for (const line of lines) arrivals.push({ at, line });
        }
        await sleep(intervalMs);
      }
    } finally {
      await handle.close();
    }
  })();
  return {
    arrivals,
    async stop() {
      stopped = true;
      await polling;
    },
  };
}
