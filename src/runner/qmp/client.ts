import { EventEmitter, once } from 'node:events';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger, type Logger } from '../../util/logger.js';
import { qmpMessageSchema, type QmpEvent, type QmpGreeting, type QmpMessage } from './protocol.js';

export type { QmpEvent, QmpGreeting };

/** qemu answered a command with `{error: {class, desc}}`. */
export class QmpError extends Error {
  override readonly name = 'QmpError';
  constructor(
    readonly command: string,
    readonly qmpClass: string,
    readonly desc: string,
  ) {
    super(`QMP command ${command} failed: ${desc} (${qmpClass})`);
  }
}

/** No reply (or event) arrived in time; the connection stays usable. */
export class QmpTimeoutError extends Error {
  override readonly name = 'QmpTimeoutError';
}

/** The connection is gone: qemu exited, or the client was closed. */
export class QmpClosedError extends Error {
  override readonly name = 'QmpClosedError';
}

export interface QmpConnectOptions {
  /** How long to keep retrying while the socket does not exist yet (qemu starting), greeting included. */
  connectTimeoutMs?: number;
  /** Default reply timeout of execute(). */
  commandTimeoutMs?: number;
  logger?: Logger;
}

interface PendingCommand {
  command: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

const DEFAULT_CONNECT_TIMEOUT_MS = 15_000;
const DEFAULT_COMMAND_TIMEOUT_MS = 30_000;
const CONNECT_RETRY_MS = 50;
// Errors that mean "qemu has not created or not yet listens on the socket".
const NOT_LISTENING_YET = new Set(['ENOENT', 'ECONNREFUSED']);

/**
 * A QMP client: one unix socket connection, numbered requests (several may be in flight),
 * per-command timeouts and events. Emits 'event' (QmpEvent) and, once, 'close' (Error when the
 * connection was lost, nothing when close() was called).
 */
export class QmpClient extends EventEmitter {
  private readonly pending = new Map<number, PendingCommand>();
  private nextId = 1;
  private buffer = '';
  private closeError: QmpClosedError | undefined;
  private greetingReceived!: (greeting: QmpGreeting) => void;
  private greetingFailed!: (error: Error) => void;
  private readonly greetingPromise = new Promise<QmpGreeting>((resolve, reject) => {
    this.greetingReceived = resolve;
    this.greetingFailed = reject;
  });
  private greetingValue: QmpGreeting | undefined;

  private constructor(
    private readonly socket: net.Socket,
    private readonly logger: Logger,
    private readonly commandTimeoutMs: number,
  ) {
    super();
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => this.onData(chunk));
    let socketError: Error | undefined;
    socket.on('error', (error) => (socketError = error));
    socket.on('close', () => this.onSocketClosed(socketError));
  }

  /** Connects (retrying until the socket appears), reads the greeting and negotiates capabilities. */
  static async connect(socketPath: string, options: QmpConnectOptions = {}): Promise<QmpClient> {
    const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    const deadline = Date.now() + connectTimeoutMs;
    const logger = options.logger ?? createLogger('qmp', { socket: socketPath });
    const socket = await connectUnixSocket(socketPath, deadline, connectTimeoutMs);
    const client = new QmpClient(socket, logger, options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS);
    try {
      const greeting = await client.receiveGreeting(Math.max(0, deadline - Date.now()));
      logger.debug({ version: greeting.QMP.version }, 'QMP greeting');
      await client.execute('qmp_capabilities', undefined, {
        timeoutMs: Math.max(1, deadline - Date.now()),
      });
    } catch (error) {
      await client.close();
      throw error;
    }
    return client;
  }

  /** The qemu version and capabilities from the greeting. */
  get greeting(): QmpGreeting {
    if (!this.greetingValue) throw new Error('QMP greeting not received yet');
    return this.greetingValue;
  }

  get closed(): boolean {
    return this.closeError !== undefined;
  }

  /**
   * Runs a command and resolves with its `return` value. Rejects with QmpError when qemu reports an
   * error, QmpTimeoutError after timeoutMs, and QmpClosedError when the connection goes away.
   */
  execute<T = unknown>(
    command: string,
    args?: Record<string, unknown>,
    options: { timeoutMs?: number } = {},
  ): Promise<T> {
    if (this.closeError) {
      return Promise.reject(new QmpClosedError(`${this.closeError.message}: cannot run ${command}`));
    }
    const id = this.nextId++;
    const timeoutMs = options.timeoutMs ?? this.commandTimeoutMs;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new QmpTimeoutError(`QMP command ${command} got no reply within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { command, resolve: resolve as (value: unknown) => void, reject, timer });
      const request = JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}), id });
      this.logger.debug({ id, command, args }, 'QMP command');
      this.socket.write(`${request}\n`);
    });
  }

  /**
   * Resolves with the next event called `name` (for which `match(data)` holds). Events that arrived
   * before the call are not seen: call this before the command that causes the event. `signal`
   * stops waiting (the command failed, so the event will not come).
   */
  waitForEvent(
    name: string,
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- event data is per-event JSON
    options: { timeoutMs?: number; match?: (data: any) => boolean; signal?: AbortSignal } = {},
  ): Promise<QmpEvent> {
    if (this.closeError) {
      return Promise.reject(new QmpClosedError(`${this.closeError.message}: no event ${name} will come`));
    }
    const timeoutMs = options.timeoutMs ?? this.commandTimeoutMs;
    return new Promise<QmpEvent>((resolve, reject) => {
      const onEvent = (event: QmpEvent) => {
        if (event.event !== name || (options.match && !options.match(event.data ?? {}))) return;
        cleanup();
        resolve(event);
      };
      const onClose = () => {
        cleanup();
        reject(new QmpClosedError(`${this.closeError?.message}: while waiting for event ${name}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new QmpTimeoutError(`no QMP event ${name} within ${timeoutMs} ms`));
      }, timeoutMs);
      const onAbort = () => {
        cleanup();
        reject(new Error(`stopped waiting for QMP event ${name}`));
      };
      const cleanup = () => {
        clearTimeout(timer);
        this.off('event', onEvent);
        this.off('close', onClose);
        options.signal?.removeEventListener('abort', onAbort);
      };
      this.on('event', onEvent);
      this.on('close', onClose);
      options.signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Closes the connection; commands still waiting reject with QmpClosedError. */
  async close(): Promise<void> {
    if (this.socket.closed) return;
    this.closeError ??= new QmpClosedError('QMP connection closed by the client');
    const socketClosed = once(this.socket, 'close');
    this.socket.destroy();
    await socketClosed;
  }

  private async receiveGreeting(timeoutMs: number): Promise<QmpGreeting> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new QmpTimeoutError(`no QMP greeting within ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      return await Promise.race([this.greetingPromise, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  private onData(chunk: string): void {
    this.buffer += chunk;
    let newline: number;
    while ((newline = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, newline).trim();
      this.buffer = this.buffer.slice(newline + 1);
      if (line) this.onLine(line);
    }
  }

  private onLine(line: string): void {
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      this.logger.warn({ line: line.slice(0, 500) }, 'skipping a QMP line that is not JSON');
      return;
    }
    const parsed = qmpMessageSchema.safeParse(json);
    if (!parsed.success) {
      this.logger.warn({ line: line.slice(0, 500) }, 'skipping an unexpected QMP message');
      return;
    }
    this.onMessage(parsed.data);
  }

  private onMessage(message: QmpMessage): void {
    switch (message.kind) {
      case 'greeting':
        if (this.greetingValue) {
          this.logger.warn('skipping a second QMP greeting');
          return;
        }
        this.greetingValue = message.greeting;
        this.greetingReceived(message.greeting);
        return;
      case 'event':
        this.logger.debug({ event: message.event.event, data: message.event.data }, 'QMP event');
        this.emit('event', message.event);
        return;
      case 'success':
      case 'failure': {
        const pending = message.id === undefined ? undefined : this.pending.get(message.id);
        if (!pending) {
          // A reply to a command that timed out, or one qemu could not attribute (e.g. a parse error).
          this.logger.warn(
            { id: message.id, kind: message.kind },
            'skipping a QMP reply no command waits for',
          );
          return;
        }
        this.pending.delete(message.id!);
        clearTimeout(pending.timer);
        if (message.kind === 'success') pending.resolve(message.value);
        else pending.reject(new QmpError(pending.command, message.error.class, message.error.desc));
      }
    }
  }

  private onSocketClosed(socketError: Error | undefined): void {
    const byClient = this.closeError !== undefined;
    this.closeError ??= new QmpClosedError('QMP connection closed (qemu exited?)', { cause: socketError });
    for (const [id, pending] of this.pending) {
      clearTimeout(pending.timer);
      this.pending.delete(id);
      pending.reject(
        new QmpClosedError(`${this.closeError.message} while waiting for the reply to ${pending.command}`, {
          cause: socketError,
        }),
      );
    }
    this.greetingFailed(new QmpClosedError(`${this.closeError.message} before the QMP greeting`));
    if (byClient) {
      this.logger.debug('QMP connection closed');
      this.emit('close');
    } else {
      this.logger.warn({ err: socketError }, 'QMP connection lost');
      this.emit('close', this.closeError);
    }
  }
}

/** Connects to a unix socket, retrying while it does not exist or nobody listens yet. */
async function connectUnixSocket(path: string, deadline: number, timeoutMs: number): Promise<net.Socket> {
  for (;;) {
    const attempt = await new Promise<net.Socket | NodeJS.ErrnoException>((resolve) => {
      const socket = net.createConnection(path);
      socket.once('connect', () => {
        socket.removeAllListeners('error');
        resolve(socket);
      });
      socket.once('error', (error) => resolve(error));
    });
    if (attempt instanceof net.Socket) return attempt;
    if (!NOT_LISTENING_YET.has(attempt.code ?? '') || Date.now() >= deadline) {
      throw new Error(`cannot connect to QMP socket ${path} within ${timeoutMs} ms: ${attempt.message}`, {
        cause: attempt,
      });
    }
    await sleep(CONNECT_RETRY_MS);
  }
}
