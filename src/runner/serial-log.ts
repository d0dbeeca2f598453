// The guest's serial output, kept in the runner's data volume so that it outlives a runner pod:
// written by the runner's console hub from what it reads off QEMU's console (older templates have
// QEMU write it, chardev `logfile`, `logappend=on`). The runner marks where each run begins and
// keeps the file small: the data volume is 1Mi and also holds the firmware variables and the TPM
// state.
import { appendFile, open, stat, type FileHandle } from 'node:fs/promises';

/** Above this size the log is cut back to its last KEEP bytes. */
export const SERIAL_LOG_LIMIT_BYTES = 128 * 1024;
export const SERIAL_LOG_KEEP_BYTES = 64 * 1024;
/** How often the runner looks at the size (a guest writes at most a few 100 KB/s to a serial port). */
export const SERIAL_LOG_CHECK_MS = 5_000;

export const RUN_MARKER_PREFIX = '[vmop: run ';

/** The line that opens a run's output; `vmop vm console` replays it with the output. */
export function runMarker(runId: string, startedAt: Date): string {
  return `${RUN_MARKER_PREFIX}${runId} started at ${startedAt.toISOString()}]`;
}

/** The last `bytes` of an open file of `size` bytes, from a line start when it had to cut. */
async function readTail(handle: FileHandle, size: number, bytes: number): Promise<Buffer> {
  const start = Math.max(0, size - bytes);
  const buffer = Buffer.alloc(size - start);
  const { bytesRead } = await handle.read(buffer, 0, buffer.length, start);
  const text = buffer.subarray(0, bytesRead);
  const newline = start > 0 ? text.indexOf('\n') : -1;
  return newline >= 0 ? text.subarray(newline + 1) : text;
}

/** The last `bytes` of the log (from a line start), '' when there is none: what a console replays. */
export async function serialLogTail(file: string, bytes: number): Promise<string> {
  const handle = await open(file, 'r').catch(() => undefined);
  if (!handle) return '';
  try {
    return (await readTail(handle, (await handle.stat()).size, bytes)).toString('utf8');
  } finally {
    await handle.close();
  }
}

/**
 * Cuts the log back to its last `keep` bytes (from a line start) when it is larger than `limit`.
 * The cut is made in place, because qemu keeps the file open: it writes with O_APPEND, so its next
 * write lands at the new end. What qemu writes during the cut itself (a few milliseconds) is lost,
 * as with logrotate's copytruncate.
 */
export async function trimSerialLog(
  file: string,
  limit = SERIAL_LOG_LIMIT_BYTES,
  keep = SERIAL_LOG_KEEP_BYTES,
): Promise<boolean> {
  const size = await stat(file).then(
    (s) => s.size,
    () => 0,
  );
  if (size <= limit) return false;
  const handle = await open(file, 'r+');
  try {
    const kept = await readTail(handle, size, keep);
    await handle.write(kept, 0, kept.length, 0);
    await handle.truncate(kept.length);
  } finally {
    await handle.close();
  }
  return true;
}

/** Opens a run's part of the log: trimmed first, then the marker on a line of its own. */
export async function startRunInSerialLog(file: string, marker: string): Promise<void> {
  await trimSerialLog(file);
  await appendFile(file, `\r\n${marker}\r\n`);
}

export interface SerialLogWriter {
  append(output: Buffer): void;
  /** Resolves once what was appended is in the file. */
  close(): Promise<void>;
}

/**
 * Appends the guest's output to the log, one write at a time and cut back between writes, so
 * nothing is lost or written twice, however late the reader was (issue 54's note: QEMU's own
 * `logfile` logs a character twice when its console's reader is late).
 */
export function serialLogWriter(file: string, onError: (err: unknown) => void): SerialLogWriter {
  let queued: Buffer[] = [];
  let writing: Promise<void> | undefined;
  const drain = async () => {
    while (queued.length > 0) {
      const output = Buffer.concat(queued);
      queued = [];
      try {
        await appendFile(file, output);
        await trimSerialLog(file);
      } catch (err) {
        onError(err);
      }
    }
    writing = undefined;
  };
  return {
    append(output) {
      queued.push(output);
      writing ??= drain();
    },
    close: async () => writing,
  };
}

/** For a template that has QEMU write the log: trims it every SERIAL_LOG_CHECK_MS while the VM runs; close() ends it. */
export function keepSerialLogSmall(file: string, onError: (err: unknown) => void): { close(): void } {
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    busy = true;
    trimSerialLog(file)
      .catch(onError)
      .finally(() => (busy = false));
  }, SERIAL_LOG_CHECK_MS);
  timer.unref();
  return { close: () => clearInterval(timer) };
}
