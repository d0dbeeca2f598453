import { pino, type Logger } from 'pino';

export type { Logger };

/** Structured JSON logs on stderr; level from VMOP_LOG_LEVEL (default info). */
export function createLogger(name: string, bindings: Record<string, unknown> = {}): Logger {
  return pino(
    { name, level: process.env.VMOP_LOG_LEVEL ?? 'info', base: { pid: process.pid, ...bindings } },
    pino.destination(2),
  );
}
