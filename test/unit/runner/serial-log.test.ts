// Trimming the serial log in place, as qemu keeps writing to it with O_APPEND.
import { mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  RUN_MARKER_PREFIX,
  runMarker,
  serialLogTail,
  startRunInSerialLog,
  trimSerialLog,
} from '../../../src/runner/serial-log.js';

const numberedLines = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}\r\n`).join('');

describe('serial log', () => {
  let dir: string;
  let file: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'vmop-serial-log-'));
    file = path.join(dir, 'console.log');
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('is left alone up to the limit', async () => {
    await writeFile(file, numberedLines(1, 100));
    expect(await trimSerialLog(file, 10_000, 5_000)).toBe(false);
    expect(await readFile(file, 'utf8')).toBe(numberedLines(1, 100));
  });

  it('is cut back to its last whole lines, and an appending writer goes on at the new end', async () => {
    const writer = await open(file, 'a'); // O_APPEND, as qemu opens it with logappend=on
    await writer.write(numberedLines(1, 2000)); // 23 KB
    expect(await trimSerialLog(file, 10_000, 5_000)).toBe(true);
    await writer.write(numberedLines(2001, 2002));
    await writer.close();
    const log = await readFile(file, 'utf8');
    expect(log.length).toBeLessThanOrEqual(5_000 + numberedLines(2001, 2002).length);
    expect(log).toMatch(/^line \d+\r\n/);
    expect(log.endsWith(numberedLines(1990, 2002))).toBe(true);
    expect(log).not.toContain('\0');
  });

  it('replays its last whole lines, all of a small log, and nothing when there is none', async () => {
    expect(await serialLogTail(file, 100)).toBe('');
    await writeFile(file, numberedLines(1, 20));
    expect(await serialLogTail(file, 100_000)).toBe(numberedLines(1, 20));
    expect(await serialLogTail(file, 30)).toBe(numberedLines(18, 20)); // 9 bytes each: 'line 17' is cut, so left out
  });

  it('opens each run with its marker on a line of its own', async () => {
    await writeFile(file, 'half a line');
    await startRunInSerialLog(file, runMarker('run-2', new Date('2026-11-23T10:00:00Z')));
    expect(await readFile(file, 'utf8')).toBe(
      `half a line\r\n${RUN_MARKER_PREFIX}run-2 started at 2026-11-23T10:00:00.000Z]\r\n`,
    );
  });
});
