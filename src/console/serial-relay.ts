// The runner-pod side of `vmop vm console NAME`: started through the Kubernetes exec API in the
// runner container, it replays the recent serial output, then relays the terminal to qemu's
// serial console socket. One session at a time: a new one takes over, and the one displaced is
// told so (its relay ends).
import { write } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import path from 'node:path';
import { Writable, type Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseRunnerConfig } from '../api/runner-config.js';
import { runnerPaths } from '../runner/paths.js';
import { serialLogTail } from '../runner/serial-log.js';

/** How much a terminal may have waiting before the relay drops the guest's output for it. */
export const RELAY_BACKLOG_BYTES = 1024 * 1024;
export const DROPPED_MESSAGE =
  '[vmop: this terminal is too slow for the guest: output dropped here; the serial log keeps it]';

/**
 * Relays the guest's output from qemu's console socket to a terminal without ever making qemu wait.
 * qemu (7.2) logs a write its socket refused and logs it again when the serial port retries it: a
 * relay that stopped reading (a slow terminal) doubled characters in the serial log. A terminal that
 * falls more than `backlog` bytes behind loses output instead, and is told once each time.
 */
export function relayWithoutWaiting(from: Readable, to: Writable, backlog = RELAY_BACKLOG_BYTES): void {
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

/**
 * A stream onto a file descriptor that never holds up the event loop: each write is made from
 * libuv's threads, and one refused for now (EAGAIN, on a non-blocking descriptor) is tried again.
 * `writableLength` tells how far the reader is behind.
 */
export class FdWriter extends Writable {
  constructor(private readonly fd: number) {
    super();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    const attempt = (offset: number) =>
      write(this.fd, chunk, offset, chunk.length - offset, null, (err, written) => {
        if (err?.code === 'EAGAIN') return void setTimeout(() => attempt(offset), 20);
        if (err) return done(err);
        if (offset + written < chunk.length) return attempt(offset + written);
        done();
      });
    attempt(0);
  }
}

/** How much of the serial log is shown before the live console. */
export const REPLAY_BYTES = 16 * 1024;
export const TAKEN_OVER_MESSAGE = '[vmop: this console session was taken over by another one]';
const SESSION_FILE = 'console.session';
/** How long an ending session waits for its terminal to take what is left. */
const FLUSH_MS = 5_000;

/** Ends the session this one replaces (its relay prints TAKEN_OVER_MESSAGE and exits). */
async function takeOver(sessionFile: string): Promise<void> {
  const previous = Number(await readFile(sessionFile, 'utf8').catch(() => ''));
  if (Number.isInteger(previous) && previous > 0 && previous !== process.pid) {
    try {
      process.kill(previous, 'SIGUSR1');
    } catch {
      // gone already
    }
  }
  await writeFile(sessionFile, String(process.pid));
}

/** qemu serves one client at a time: the displaced one may take a moment to let go. */
async function connectConsole(socketPath: string): Promise<Socket> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await new Promise<Socket>((resolve, reject) => {
        const socket = connect(socketPath, () => resolve(socket));
        socket.once('error', reject);
      });
    } catch (err) {
      if (attempt >= 20) throw new Error(`cannot reach the serial console: ${(err as Error).message}`);
      await sleep(250);
    }
  }
}

export async function relaySerialConsole(configPath: string): Promise<number> {
  const parsed = parseRunnerConfig(await readFile(configPath, 'utf8'));
  if (!parsed.ok) {
    process.stderr.write(`vmop: the runner config is invalid: ${parsed.errors.join('; ')}\n`);
    return 2;
  }
  const paths = runnerPaths(parsed.config['/Runner'], { configPath, env: process.env, cwd: process.cwd() });
  // Node writes to a pipe or terminal on stdout synchronously: a terminal that stopped reading
  // would stop the relay, and qemu behind it. Written from libuv's threads instead, the relay goes
  // on and sees how far behind the terminal is.
  const terminal = new FdWriter(process.stdout.fd);
  // Listen before taking over: a newer session may come at any moment, even during the replay.
  const session: { socket?: Socket; ended: boolean } = { ended: false };
  let finish: (code: number) => void = () => undefined;
  const done = new Promise<number>((resolve) => (finish = resolve));
  const end = (code: number) => {
    session.ended = true;
    session.socket?.destroy();
    // What the terminal has yet to get, unless it is stuck.
    setTimeout(() => finish(code), FLUSH_MS).unref();
    terminal.end(() => finish(code));
  };
  // The terminal went away (the exec stream closed): so did the session.
  terminal.on('error', () => end(0));
  process.on('SIGUSR1', () => terminal.write(`\r\n${TAKEN_OVER_MESSAGE}\r\n`, () => end(0)));
  await takeOver(path.join(paths.runtimeDir, SESSION_FILE));
  terminal.write(await serialLogTail(paths.consoleLog, REPLAY_BYTES));
  if (session.ended) return done;
  const connected = await connectConsole(paths.consoleSocket);
  session.socket = connected;
  // Taken over while connecting: leave qemu's one client slot to the newcomer.
  if (session.ended) {
    connected.destroy();
    return done;
  }
  // Under the exec API's TTY: bytes as they come, no echo (the guest echoes).
  if (process.stdin.isTTY) process.stdin.setRawMode(true);
  relayWithoutWaiting(connected, terminal);
  process.stdin.pipe(connected);
  process.stdin.on('end', () => end(0));
  connected.on('close', () => end(0));
  return done;
}
