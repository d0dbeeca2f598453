import type { Logger } from '../util/logger.js';

const CONNECTION_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENOTFOUND',
]);

function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as NodeJS.ErrnoException).code;
  return (
    (code !== undefined && CONNECTION_ERROR_CODES.has(code)) || /connection is closed/i.test(err.message)
  );
}

/**
 * Error reporting for the queue's Redis clients: every client retries every few hundred ms while
 * Redis is away, so connection errors are logged once per outage, other errors each time.
 */
export class OutageLog {
  private down = false;

  constructor(private readonly logger: Logger) {}

  /** An 'error' listener for Redis clients and BullMQ objects (without one, Node prints every error). */
  readonly error = (err: unknown): void => {
    if (!isConnectionError(err)) {
      this.logger.warn({ err }, 'work queue error');
    } else if (!this.down) {
      this.down = true;
      this.logger.warn({ err }, 'lost the Redis connection; reconnecting');
    }
  };

  /** A 'ready' listener: the connection is back. */
  readonly ready = (): void => {
    if (!this.down) return;
    this.down = false;
    this.logger.info('Redis connection is back');
  };
}
