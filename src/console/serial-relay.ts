// The runner-pod side of `vmop vm console NAME` and the GUI's terminal: started through the
// Kubernetes exec API in the runner container, it connects the terminal to the runner's serial
// console hub (serial-hub.ts), which replays the recent serial output and then relays the live
// console. One session at a time: a new one takes over by connecting to the hub, and the one
// displaced is told so by the hub (its relay ends). With `askFirst` it connects only once its client
// says go (relay-go.ts). The relay signals nobody and leaves nothing behind.
import { write } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseRunnerConfig } from '../api/runner-config.js';
import { runnerPaths } from '../runner/paths.js';
import { relayWithoutWaiting } from './relay-without-waiting.js';
import { RELAY_ASKS, clientSaysGo } from './relay-go.js';

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

/** How long an ending session waits for its terminal to take what is left. */
const FLUSH_MS = 5_000;

/** The hub is the runner's: a runner that is starting has it a moment later. */
async function connectHub(socketPath: string): Promise<Socket> {
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

export async function relaySerialConsole(
  configPath: string,
  options: { askFirst?: boolean } = {},
): Promise<number> {
  const parsed = parseRunnerConfig(await readFile(configPath, 'utf8'));
  if (!parsed.ok) {
    process.stderr.write(`vmop: the runner config is invalid: ${parsed.errors.join('; ')}\n`);
    return 2;
  }
  const paths = runnerPaths(parsed.config['/Runner'], { configPath, env: process.env, cwd: process.cwd() });
  // Under the exec API's TTY: bytes as they come, no echo (the guest echoes).
  if (process.stdin.isTTY) process.stdin.setRawMode(true);
  let typedMeanwhile: Buffer = Buffer.alloc(0);
  if (options.askFirst) {
    process.stderr.write(RELAY_ASKS);
    const rest = await clientSaysGo(process.stdin);
    if (rest === undefined) return 0; // the client is gone, or another session is newer: not ours
    typedMeanwhile = rest;
  }
  let hub: Socket;
  try {
    hub = await connectHub(paths.consoleSessionsSocket);
  } catch (err) {
    process.stderr.write(`vmop: ${(err as Error).message}\n`);
    return 1;
  }
  // Node writes to a pipe or terminal on stdout synchronously: a terminal that stopped reading
  // would stop the relay, and the hub behind it. Written from libuv's threads instead, the relay
  // goes on and sees how far behind the terminal is.
  const terminal = new FdWriter(process.stdout.fd);
  let finish: (code: number) => void = () => undefined;
  const done = new Promise<number>((resolve) => (finish = resolve));
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    hub.destroy();
    // What the terminal has yet to get, unless it is stuck.
    setTimeout(() => finish(0), FLUSH_MS).unref();
    terminal.end(() => finish(0));
  };
  // The terminal went away (the exec stream closed, or its hang-up): so did the session.
  terminal.on('error', end);
  process.once('SIGHUP', end);
  hub.on('error', end);
  relayWithoutWaiting(hub, terminal);
  if (typedMeanwhile.length > 0) hub.write(typedMeanwhile);
  process.stdin.pipe(hub);
  process.stdin.on('end', end);
  // The hub ended the session (taken over, or the VM stopped): it said so on the way.
  hub.on('end', end);
  hub.on('close', end);
  return done;
}
