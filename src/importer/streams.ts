// Byte streams of an import: the first bytes looked at without losing them, and decompression.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import type { Compression } from './format.js';
import { ImportFailure } from './failure.js';

export type Bytes = AsyncIterable<Buffer>;

/** At least `size` bytes of the start (fewer when the data is shorter), and all of the data again. */
export async function peek(
  data: Bytes,
  size: number,
): Promise<{ head: Buffer; all: AsyncGenerator<Buffer> }> {
  const iterator = data[Symbol.asyncIterator]();
  const taken: Buffer[] = [];
  let length = 0;
  let done = false;
  while (length < size) {
    const next = await iterator.next();
    if (next.done) {
      done = true;
      break;
    }
    taken.push(next.value);
    length += next.value.length;
  }
  async function* all() {
    try {
      yield* taken;
      if (done) return;
      for (let next = await iterator.next(); !next.done; next = await iterator.next()) yield next.value;
    } finally {
      // A consumer that stops early stops the source too (a decompressor's process, a download).
      if (!done) await iterator.return?.();
    }
  }
  return { head: Buffer.concat(taken), all: all() };
}

/** The decompressed data; an error of `data` itself (a broken download) comes through as it is. */
export function decompress(compression: Compression, data: Bytes): Bytes {
  return compression === 'gzip' ? gunzip(data) : unxz(data);
}

async function* gunzip(data: Bytes): Bytes {
  const input = Readable.from(data);
  const output = createGunzip();
  input.on('error', (err) => output.destroy(err));
  input.pipe(output);
  try {
    for await (const chunk of output) yield chunk as Buffer;
  } catch (err) {
    // zlib's own errors carry Z_* codes; anything else is the download's.
    if (String((err as { code?: string }).code).startsWith('Z_'))
      throw new ImportFailure('CorruptImage', `the gzip data is broken: ${(err as Error).message}`);
    throw err;
  } finally {
    input.destroy();
  }
}

async function* unxz(data: Bytes): Bytes {
  const child = spawn('xz', ['--decompress', '--stdout'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = once(child, 'close') as Promise<[number | null]>;
  let inputError: unknown;
  const input = Readable.from(data);
  input.on('error', (err) => {
    inputError = err;
    child.stdin.destroy();
  });
  child.stdin.on('error', () => {}); // xz gone early: its exit status tells
  input.pipe(child.stdin);
  try {
    for await (const chunk of child.stdout) yield chunk as Buffer;
    const [code] = await exited;
    if (inputError) throw inputError;
    if (code !== 0) throw new ImportFailure('CorruptImage', `the xz data is broken: ${stderr.trim()}`);
  } finally {
    input.destroy();
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}
