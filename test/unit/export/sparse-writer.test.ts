// What `vmop vm export -o` writes: the bytes it was sent, with whole zero blocks left as holes.
import { mkdtemp, open, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { SPARSE_BLOCK, SparseWriter } from '../../../src/export/sparse-writer.js';

let dir: string;
beforeEach(async () => (dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-sparse-'))));
afterEach(() => rm(dir, { recursive: true, force: true }));

/** Writes `content` in chunks of `chunkBytes` (as a download comes), returns the file. */
async function writeInChunks(content: Buffer, chunkBytes: number, sparse: boolean) {
  const file = path.join(dir, 'disk');
  const handle = await open(file, 'w');
  const writer = new SparseWriter(handle, sparse);
  for (let offset = 0; offset < content.length; offset += chunkBytes)
    await writer.write(content.subarray(offset, offset + chunkBytes));
  await writer.finish();
  await handle.close();
  return { file, written: writer.written };
}

/** 8 MiB: data, 2 MiB of zeros, data with a zero byte inside a block, zeros up to the end. */
function diskContent(): Buffer {
  const MiB = 1024 * 1024;
  const content = Buffer.alloc(8 * MiB);
  content.fill(0x5a, 0, 3 * MiB);
  content.fill(0xa5, 5 * MiB, 6 * MiB + 100);
  content[5 * MiB + 7] = 0;
  return content;
}

it('writes exactly the bytes it was sent, in chunks of any size, and the zero blocks are holes', async () => {
  const content = diskContent();
  for (const chunkBytes of [16 * 1024, 65_537, 1024 * 1024 + 3]) {
    const { file, written } = await writeInChunks(content, chunkBytes, true);
    expect(written).toBe(content.length);
    expect((await readFile(file)).equals(content)).toBe(true);
    // Data is 4 MiB and 100 bytes (one block more); the 4 MiB of zeros take no blocks.
    const allocated = (await stat(file)).blocks * 512;
    expect(allocated).toBeGreaterThanOrEqual(4 * 1024 * 1024);
    expect(allocated).toBeLessThanOrEqual(4 * 1024 * 1024 + 2 * SPARSE_BLOCK);
    await rm(file);
  }
});

it('writes every byte when not sparse (a qcow2 image), and a file of zeros only has its length', async () => {
  const content = diskContent();
  const dense = await writeInChunks(content, 100_000, false);
  expect((await readFile(dense.file)).equals(content)).toBe(true);
  expect((await stat(dense.file)).blocks * 512).toBeGreaterThanOrEqual(content.length);
  await rm(dense.file);
  const zeros = await writeInChunks(Buffer.alloc(3 * SPARSE_BLOCK + 5), 50_000, true);
  expect((await stat(zeros.file)).size).toBe(3 * SPARSE_BLOCK + 5);
  expect((await stat(zeros.file)).blocks).toBe(0);
});
