import type { IMPORT_FAILURES } from '../api/import-progress.js';

/** An import that cannot succeed as asked: the reason and message go into the VM's status. */
export class ImportFailure extends Error {
  constructor(
    readonly reason: (typeof IMPORT_FAILURES)[number],
    message: string,
  ) {
    super(message);
  }
}

/** A download that may work when tried again (the network, a server's 5xx). */
export class RetryableDownload extends Error {
  constructor(
    readonly reason: 'Unreachable' | 'HttpError',
    message: string,
  ) {
    super(message);
  }
}

/** An error's message with its cause (fetch hides the useful part, e.g. ECONNREFUSED, there). */
export function describeError(err: unknown): string {
  const error = err as { message?: string; cause?: { message?: string; code?: string } };
  const cause = error.cause?.message ?? error.cause?.code;
  return [error.message ?? String(err), cause].filter(Boolean).join(': ');
}
