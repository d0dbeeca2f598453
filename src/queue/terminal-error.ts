/**
 * Thrown by a handler when retrying cannot help (e.g. an invalid spec): the key is not retried
 * and stays visible as failed, with this message, until it is added again.
 */
export class TerminalError extends Error {
  override readonly name = 'TerminalError';
}
