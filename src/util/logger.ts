import { pino, type Logger } from 'pino';

export type { Logger };

/** Structured JSON logs on stderr; level from VMOP_LOG_LEVEL (default info). */
export function createLogger(name: string, bindings: Record<string, unknown> = {}): Logger {
  return pino(
    { name, level: process.env.VMOP_LOG_LEVEL ?? 'info', base: { pid: process.pid, ...bindings } },
    // Synchronous, so lines leave in the order they were logged. Async, a line waits for a thread of
    // libuv's pool; at process.exit pino writes the lines after it synchronously, and the waiting
    // one lands last: a runner's last snapshot read `starting` after its `failed` (CI at stop 50).
    pino.destination({ dest: 2, sync: true }),
  );
}
