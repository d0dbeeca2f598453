// The runner-pod side of `vmop vm console NAME`: started through the Kubernetes exec API in the
// runner container, it replays the recent serial output, then relays the terminal to qemu's
// serial console socket. One session at a time: a new one takes over, and the one displaced is
// told so (its relay ends).
import { readFile, writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseRunnerConfig } from '../api/runner-config.js';
import { runnerPaths } from '../runner/paths.js';
import { serialLogTail } from '../runner/serial-log.js';

/** How much of the serial log is shown before the live console. */
export const REPLAY_BYTES = 16 * 1024;
export const TAKEN_OVER_MESSAGE = '[vmop: this console session was taken over by another one]';
const SESSION_FILE = 'console.session';

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
  // Listen before taking over: a newer session may come at any moment, even during the replay.
  const session: { socket?: Socket; ended: boolean } = { ended: false };
  let finish: (code: number) => void = () => undefined;
  const done = new Promise<number>((resolve) => (finish = resolve));
  const end = (code: number) => {
    session.ended = true;
    session.socket?.destroy();
    finish(code);
  };
  process.on('SIGUSR1', () => process.stdout.write(`\r\n${TAKEN_OVER_MESSAGE}\r\n`, () => end(0)));
  await takeOver(path.join(paths.runtimeDir, SESSION_FILE));
  process.stdout.write(await serialLogTail(paths.consoleLog, REPLAY_BYTES));
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
  connected.pipe(process.stdout, { end: false });
  process.stdin.pipe(connected);
  process.stdin.on('end', () => end(0));
  connected.on('close', () => end(0));
  return done;
}
