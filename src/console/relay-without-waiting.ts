// Passing the guest's console output on without ever making QEMU wait for a slow reader.
import type { Readable } from 'node:stream';

/** How much a reader may have waiting before the guest's output is dropped for it. */
export const RELAY_BACKLOG_BYTES = 1024 * 1024;
export const DROPPED_MESSAGE =
  '[vmop: this terminal is too slow for the guest: output dropped here; the serial log keeps it]';

/** Where output goes: a stream, or whatever stands for the reader of the moment. */
export interface RelayTarget {
  readonly writableLength: number;
  write(chunk: Buffer | string): unknown;
}

/**
 * Relays `from` to `to`, reading `from` as fast as it comes. qemu (7.2) logs a write its socket
 * refused and logs it again when the serial port retries it: a relay that stopped reading (a slow
 * terminal) doubled characters in the serial log. A reader that falls more than `backlog` bytes
 * behind loses output instead, and is told once each time.
 */
export function relayWithoutWaiting(from: Readable, to: RelayTarget, backlog = RELAY_BACKLOG_BYTES): void {
  let dropping = false;
  from.on('data', (chunk: Buffer) => {
    if (to.writableLength > backlog) {
      if (!dropping) to.write(`\r\n${DROPPED_MESSAGE}\r\n`);
      dropping = true;
      return;
    }
    dropping = false;
    to.write(chunk);
  });
}
