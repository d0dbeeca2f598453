// The runner's end of the serial console: it holds QEMU's one console connection for the VM's whole
// run and lends it to one session at a time (`vmop vm console`, the GUI's terminal), each a relay
// that connects to the hub's socket. A newcomer takes over by connecting: the hub tells the session
// it displaces and closes it. No session is named by a pid or a file, so nothing can be signalled by
// mistake and nothing is left when a session ends (issue 52).
import { readFile, rm } from 'node:fs/promises';
import net, { type Socket } from 'node:net';
import type { Logger } from '../util/logger.js';
import { serialLogTail } from '../runner/serial-log.js';
import { relayWithoutWaiting } from './relay-without-waiting.js';

/** How much of the serial output a new session sees first. */
export const REPLAY_BYTES = 16 * 1024;
export const TAKEN_OVER_MESSAGE = '[vmop: this console session was taken over by another one]';
export const NOT_RUNNING_MESSAGE = "[vmop: the VM's serial console does not run: this was its log]";
/** How long an ended session gets to take what is left before it is cut. */
const FLUSH_MS = 5_000;

export interface SerialConsoleHub {
  /**
   * Holds QEMU's console socket from now on (call it before the guest runs, so nothing it writes is
   * missed; until then sessions wait). False when there is none (a template without that chardev).
   */
  attachQemu(consoleSocket: string, logOutput?: (output: Buffer) => void): Promise<boolean>;
  close(): Promise<void>;
}

/** The last `bytes` of `buffer`, from a line start when it had to cut (as serialLogTail does). */
function tail(buffer: Buffer, bytes: number): Buffer {
  if (buffer.length <= bytes) return buffer;
  const cut = buffer.subarray(buffer.length - bytes);
  const newline = cut.indexOf('\n');
  return newline >= 0 ? cut.subarray(newline + 1) : cut;
}

const ESC = '\\x1b';
/** Device status and attributes (CSI n, CSI c), window size reports (CSI t), colour queries (OSC ?). */
const TERMINAL_QUERIES = [
  `${ESC}\\[[?>=]?[0-9;]*[nc]`,
  `${ESC}\\[(?:14|16|18|19|21)t`,
  `${ESC}\\][0-9]+;\\?(?:\\x07|${ESC}\\\\)`,
].map((source) => new RegExp(source, 'g'));

/**
 * The replay without the guest's questions to its terminal (cursor position, status, device
 * attributes, window size, colours): they were asked and answered long ago, and a terminal that
 * answered them again would type the answers at the guest's prompt (issue 56: `^[[15;13R`).
 */
export function withoutTerminalQueries(replay: Buffer | string): Buffer {
  const bytes = typeof replay === 'string' ? Buffer.from(replay) : replay;
  const text = bytes.toString('latin1'); // byte for byte
  const stripped = TERMINAL_QUERIES.reduce((rest, query) => rest.replace(query, ''), text);
  return stripped.length === text.length ? bytes : Buffer.from(stripped, 'latin1');
}

function endSession(socket: Socket, message?: string): void {
  if (message) socket.write(`\r\n${message}\r\n`);
  socket.end();
  setTimeout(() => socket.destroy(), FLUSH_MS).unref();
}

/** Serves console sessions on `socketPath` (the runner's user only) until closed. */
export async function startSerialConsoleHub(options: {
  socketPath: string;
  /** QEMU's serial log: what a session sees first while no QEMU is held. */
  consoleLog: string;
  logger: Logger;
}): Promise<SerialConsoleHub> {
  const { logger } = options;
  /** waiting: no QEMU yet; held: QEMU's console is ours; gone: QEMU ended, or has no console. */
  let state: 'waiting' | 'held' | 'gone' = 'waiting';
  let qemu: Socket | undefined;
  /** The log's tail when QEMU was taken, and all QEMU wrote since: a replay with no gap. */
  let replay: Buffer = Buffer.alloc(0);
  let session: Socket | undefined;

  const open = async (socket: Socket) => {
    socket.on('error', () => undefined);
    const logged = state === 'held' ? '' : await serialLogTail(options.consoleLog, REPLAY_BYTES);
    if (socket.destroyed) return;
    // From here on in one go: the replay and the live output that follows it meet exactly.
    const previous = session;
    session = socket;
    if (previous) endSession(previous, TAKEN_OVER_MESSAGE);
    logger.info({ tookOver: previous !== undefined }, 'serial console session opened');
    socket.on('close', () => {
      if (session === socket) session = undefined;
    });
    socket.write(withoutTerminalQueries(state === 'held' ? tail(replay, REPLAY_BYTES) : logged));
    if (state === 'gone') {
      session = undefined;
      return endSession(socket, NOT_RUNNING_MESSAGE);
    }
    socket.on('data', (keys: Buffer) => {
      if (session === socket) qemu?.write(keys);
    });
  };

  const server = net.createServer((socket) => void open(socket));
  await rm(options.socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ path: options.socketPath, readableAll: false, writableAll: false }, resolve);
  });

  const release = () => {
    state = 'gone';
    qemu = undefined;
    if (session) endSession(session);
    session = undefined;
  };

  return {
    async attachQemu(consoleSocket, logOutput) {
      const connection = await new Promise<Socket | undefined>((resolve) => {
        const socket = net.connect(consoleSocket, () => resolve(socket));
        socket.once('error', (err) => {
          logger.info({ err: err.message }, 'no serial console to hold');
          resolve(undefined);
        });
      });
      if (!connection) {
        release();
        return false;
      }
      connection.on('error', (err) => logger.warn({ err }, 'the serial console connection failed'));
      replay = tail(await readFile(options.consoleLog).catch(() => Buffer.alloc(0)), REPLAY_BYTES);
      qemu = connection;
      state = 'held';
      connection.on('data', (output: Buffer) => {
        replay = tail(Buffer.concat([replay, output]), 2 * REPLAY_BYTES);
        logOutput?.(output);
      });
      // To the session of the moment; a slow one loses output rather than make QEMU wait.
      relayWithoutWaiting(connection, {
        get writableLength() {
          return session?.writableLength ?? 0;
        },
        write: (chunk) => session?.write(chunk),
      });
      connection.on('close', () => {
        if (qemu === connection) release();
      });
      return true;
    },
    async close() {
      qemu?.destroy();
      session?.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await rm(options.socketPath, { force: true });
    },
  };
}
