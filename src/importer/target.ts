// The disk an import writes: its size, zeroing it first (so zero runs need no writing: the
// result is sparse where the storage can be), and writing raw data to it.
import { execFile } from 'node:child_process';
import { open, stat, truncate } from 'node:fs/promises';
import { promisify } from 'node:util';
import type { Bytes } from './streams.js';
import { ImportFailure } from './failure.js';

const run = promisify(execFile);

export interface Target {
  path: string;
  /** Bytes it holds. */
  size: number;
  /** Whether it reads as zeros throughout now (so zeros need not be written). */
  zeroed: boolean;
}

/** The bytes a block device or a file holds, and which of the two it is. */
async function deviceFacts(path: string): Promise<{ size: number; block: boolean }> {
  const facts = await stat(path);
  if (!facts.isBlockDevice()) return { size: facts.size, block: false };
  return { size: Number((await run('blockdev', ['--getsize64', path])).stdout.trim()), block: true };
}

export const sizeOf = async (path: string) => (await deviceFacts(path)).size;

/** Looks at the target (a block device in a pod, a file elsewhere) and zeroes it where it can. */
export async function prepareTarget(path: string): Promise<Target> {
  const { size, block } = await deviceFacts(path);
  if (!block) {
    await truncate(path, 0);
    await truncate(path, size);
    return { path, size, zeroed: true };
  }
  // BLKZEROOUT: unmaps where the device can, writes zeros where it cannot; either way all reads 0.
  const zeroed = await run('blkdiscard', ['--zeroout', path]).then(
    () => true,
    () => false,
  );
  return { path, size, zeroed };
}

const BLOCK = 4 * 1024 * 1024;
const SEGMENT = 64 * 1024;
const ZEROS = Buffer.alloc(SEGMENT);

function isZero(data: Buffer): boolean {
  for (let offset = 0; offset < data.length; offset += SEGMENT) {
    const segment = data.subarray(offset, offset + SEGMENT);
    if (!segment.equals(ZEROS.subarray(0, segment.length))) return false;
  }
  return true;
}

const tooLarge = (target: Target) =>
  new ImportFailure(
    'TooLarge',
    `the image is larger than the disk: more than the ${target.size} bytes its claim holds`,
  );

/** Writes `data` from the target's start; returns the bytes written. Zero runs are skipped on a zeroed target. */
export async function writeRaw(data: Bytes, target: Target): Promise<number> {
  const file = await open(target.path, 'r+');
  try {
    const buffer = Buffer.allocUnsafe(BLOCK);
    let position = 0;
    let filled = 0;
    const write = (from: number, to: number) => file.write(buffer, from, to - from, position + from);
    const flush = async () => {
      // Each run of segments that are not all zeros goes in one write.
      let run = -1;
      for (let offset = 0; offset < filled; offset += SEGMENT) {
        const zero = target.zeroed && isZero(buffer.subarray(offset, Math.min(offset + SEGMENT, filled)));
        if (!zero && run < 0) run = offset;
        if (zero && run >= 0) {
          await write(run, offset);
          run = -1;
        }
      }
      if (run >= 0) await write(run, filled);
      position += filled;
      filled = 0;
    };
    for await (const whole of data) {
      // Zeros past the end cost nothing to leave out (a bigger disk copied onto a smaller one).
      const room = Math.max(0, target.size - position - filled);
      if (whole.length > room && !isZero(whole.subarray(room))) throw tooLarge(target);
      const chunk = whole.length > room ? whole.subarray(0, room) : whole;
      for (let used = 0; used < chunk.length;) {
        const taken = chunk.copy(buffer, filled, used, Math.min(chunk.length, used + BLOCK - filled));
        used += taken;
        filled += taken;
        if (filled === BLOCK) await flush();
      }
    }
    await flush();
    await file.sync();
    return position;
  } finally {
    await file.close();
  }
}
