import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { DROPPED_MESSAGE, relayWithoutWaiting } from '../../../src/console/relay-without-waiting.js';
import { FdWriter } from '../../../src/console/serial-relay.js';
import { withoutTerminalQueries } from '../../../src/console/serial-hub.js';

/** All a terminal has to read now, as it reads it. */
async function readAll(terminal: PassThrough): Promise<string> {
  let shown = '';
  for (;;) {
    await new Promise((resolve) => setImmediate(resolve));
    const chunk = terminal.read() as Buffer | null;
    if (chunk === null) return shown;
    shown += String(chunk);
  }
}

describe('the serial console relay', () => {
  it("passes the guest's output on as it comes to a terminal that keeps up", () => {
    const [qemu, terminal] = [new PassThrough(), new PassThrough()];
    relayWithoutWaiting(qemu, terminal, 100);
    for (const chunk of ['login: ', 'root\r\n', '# ']) {
      qemu.write(chunk);
      // The terminal reads each at once.
      expect(String(terminal.read())).toBe(chunk);
    }
  });

  it('never stops reading qemu: a terminal that falls behind loses output, told once each time', async () => {
    const [qemu, terminal] = [new PassThrough(), new PassThrough({ highWaterMark: 16 })];
    relayWithoutWaiting(qemu, terminal, 64);
    const written = Array.from({ length: 40 }, (_, i) => `line ${i}\r\n`);
    for (const line of written) qemu.write(line);
    // qemu's side was drained whatever the terminal did (qemu sees no refused write).
    expect(qemu.readableLength).toBe(0);
    expect(qemu.readableFlowing).toBe(true);
    const shown = await readAll(terminal);
    expect(shown.split(DROPPED_MESSAGE)).toHaveLength(2);
    expect(shown.startsWith(written.slice(0, 3).join(''))).toBe(true);
    expect(shown.length).toBeLessThan(written.join('').length);
    // Caught up, it gets output again.
    qemu.write('after\r\n');
    expect(await readAll(terminal)).toBe('after\r\n');
  });
});

describe("the relay's writer onto the terminal's descriptor", () => {
  it('waits out a reader that stops, on a non-blocking descriptor, without holding up the event loop; every byte arrives once', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'vmop-fd-writer-'));
    try {
      const fifo = path.join(dir, 'terminal');
      const out = path.join(dir, 'out');
      execFileSync('mkfifo', [fifo]);
      // A terminal that opens at once but reads only a second later.
      const reader = spawn('sh', ['-c', 'exec 3<"$0"; sleep 1; cat <&3 >"$1"', fifo, out]);
      let fd = -1;
      while (fd < 0) {
        try {
          fd = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
        } catch {
          await new Promise((resolve) => setTimeout(resolve, 20)); // not opened yet (ENXIO)
        }
      }
      const data = Buffer.from(Array.from({ length: 20_000 }, (_, i) => `line ${i}\n`).join(''));
      const writer = new FdWriter(fd);
      let ticks = 0;
      const ticker = setInterval(() => ticks++, 10);
      for (let offset = 0; offset < data.length; offset += 4096)
        writer.write(data.subarray(offset, offset + 4096));
      // The pipe holds 64 KiB: the rest waits in the writer, which says so.
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(writer.writableLength).toBeGreaterThan(0);
      await new Promise<void>((resolve) => writer.end(resolve));
      clearInterval(ticker);
      closeSync(fd);
      await new Promise((resolve) => reader.once('exit', resolve));
      expect(ticks).toBeGreaterThan(50); // the event loop went on meanwhile (the reader slept 1 s)
      expect(readFileSync(out).equals(data)).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the hub's replay", () => {
  it("drops the guest's questions to its terminal and keeps everything else byte for byte", () => {
    const asked = Buffer.concat([
      Buffer.from('login: \x1b[6n\x1b[?6n\x1b[c\x1b[>0c\x1b[18t\x1b]11;?\x07\x1b]10;?\x1b\\'),
      Buffer.from([0xc3, 0xa9, 0xff]), // é, and a byte that is no UTF-8
      Buffer.from('\x1b[1;32mgreen\x1b[0m \x1b[2J\x1b[H'),
    ]);
    expect(withoutTerminalQueries(asked)).toEqual(
      Buffer.concat([
        Buffer.from('login: '),
        Buffer.from([0xc3, 0xa9, 0xff]),
        Buffer.from('\x1b[1;32mgreen\x1b[0m \x1b[2J\x1b[H'),
      ]),
    );
  });
});
