import { mkdir, mkdtemp, readdir, readFile, readlink, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writePayload } from '../../../src/node/volumes/atomic-writer.js';
import type { Payload } from '../../../src/node/volumes/projection.js';

const payload = (files: Record<string, string>, mode = 0o644): Payload =>
  new Map(Object.entries(files).map(([file, text]) => [file, { content: Buffer.from(text), mode }]));

describe('atomic writer (kubelet layout on a real file system)', () => {
  let dir: string;
  beforeEach(async () => {
    dir = path.join(await mkdtemp(path.join(os.tmpdir(), 'vmop-atomic-')), 'volume');
  });
  afterEach(async () => {
    await rm(path.dirname(dir), { recursive: true, force: true });
  });

  it('writes files into a version directory that ..data points to, each name a link through ..data', async () => {
    expect(await writePayload(dir, payload({ 'config.yaml': 'a: 1\n', 'sub/nested.txt': 'deep' }))).toBe(
      true,
    );
    const version = await readlink(path.join(dir, '..data'));
    expect(version).toMatch(/^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\./);
    expect(await readlink(path.join(dir, 'config.yaml'))).toBe('..data/config.yaml');
    expect(await readlink(path.join(dir, 'sub'))).toBe('..data/sub');
    expect(await readFile(path.join(dir, 'config.yaml'), 'utf8')).toBe('a: 1\n');
    expect(await readFile(path.join(dir, 'sub/nested.txt'), 'utf8')).toBe('deep');
  });

  it('swaps in a new version on change, drops names no longer there, and removes the old version', async () => {
    await writePayload(dir, payload({ 'config.yaml': 'a: 1\n', 'old.txt': 'x' }));
    const first = await readlink(path.join(dir, '..data'));
    await mkdir(path.join(dir, 'display-secret')); // a nested mount point: not the writer's
    expect(await writePayload(dir, payload({ 'config.yaml': 'a: 2\n' }))).toBe(true);
    const second = await readlink(path.join(dir, '..data'));
    expect(second).not.toBe(first);
    expect(await readFile(path.join(dir, 'config.yaml'), 'utf8')).toBe('a: 2\n');
    expect((await readdir(dir)).sort()).toEqual(['..data', second, 'config.yaml', 'display-secret'].sort());
  });

  it('leaves everything alone when the content is unchanged', async () => {
    await writePayload(dir, payload({ 'config.yaml': 'same' }));
    const before = await stat(path.join(dir, '..data'));
    expect(await writePayload(dir, payload({ 'config.yaml': 'same' }))).toBe(false);
    expect((await stat(path.join(dir, '..data'))).ino).toBe(before.ino);
  });

  it('gives files their mode regardless of the umask', async () => {
    await writePayload(dir, payload({ password: 'secret' }, 0o600));
    expect((await stat(path.join(dir, 'password'))).mode & 0o777).toBe(0o600);
  });

  it('refuses paths that leave the volume or touch its .. entries', async () => {
    await expect(writePayload(dir, payload({ '../escape': 'x' }))).rejects.toThrow(/refusing/);
    await expect(writePayload(dir, payload({ '..data': 'x' }))).rejects.toThrow(/refusing/);
    await expect(writePayload(dir, payload({ '/etc/passwd': 'x' }))).rejects.toThrow(/refusing/);
  });
});
