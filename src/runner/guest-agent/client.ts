// A qemu-guest-agent client on qemu's chardev socket for the org.qemu.guest_agent.0 port. The
// protocol is QMP-like JSON lines, one command at a time, without a greeting; anything written
// while the agent was not listening may be answered late, so every exchange starts with
// guest-sync and a fresh id, and everything before that id's reply is dropped.
import net from 'node:net';
import { once } from 'node:events';
import { z } from 'zod';

/** A line as JSON, or undefined for anything else (a partial line left from before a sync). */
function parseLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

const Reply = z.union([
  z.object({ return: z.unknown() }),
  z.object({ error: z.object({ class: z.string(), desc: z.string() }) }),
]);

export class GuestAgentClient {
  private buffer = '';
  private waiting: ((line: string) => void) | undefined;
  private lines: string[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  private nextSyncId = Math.floor(Math.random() * 1_000_000);

  private constructor(private readonly socket: net.Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      this.buffer += chunk;
      let newline: number;
      while ((newline = this.buffer.indexOf('\n')) >= 0) {
        // guest-sync-delimited puts 0xFF before its reply; plain lines may be empty.
        const line = this.buffer.slice(0, newline).replace(/\xff/g, '').trim();
        this.buffer = this.buffer.slice(newline + 1);
        if (!line) continue;
        if (this.waiting) this.waiting(line);
        else this.lines.push(line);
      }
    });
    socket.on('error', () => undefined); // 'close' follows; callers see their timeouts
  }

  static async connect(socketPath: string): Promise<GuestAgentClient> {
    const socket = net.connect(socketPath);
    await once(socket, 'connect');
    return new GuestAgentClient(socket);
  }

  get closed(): boolean {
    return this.socket.destroyed;
  }

  close(): void {
    this.socket.destroy();
  }

  private nextLine(timeoutMs: number): Promise<string> {
    const queued = this.lines.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting = undefined;
        reject(new Error(`the guest agent did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting = (line) => {
        clearTimeout(timer);
        this.waiting = undefined;
        resolve(line);
      };
    });
  }

  private send(command: string, args?: Record<string, unknown>): void {
    this.socket.write(`${JSON.stringify({ execute: command, ...(args && { arguments: args }) })}\n`);
  }

  /** guest-sync, then the command; resolves with its `return` value (undefined when `noReply`). */
  execute(
    command: string,
    options: { args?: Record<string, unknown>; timeoutMs?: number; noReply?: boolean } = {},
  ) {
    const run = async () => {
      const timeoutMs = options.timeoutMs ?? 5_000;
      const id = ++this.nextSyncId;
      this.lines = [];
      this.send('guest-sync', { id });
      for (;;) {
        const reply = Reply.safeParse(parseLine(await this.nextLine(timeoutMs)));
        if (reply.success && 'return' in reply.data && reply.data.return === id) break;
      }
      this.send(command, options.args);
      if (options.noReply) return undefined;
      const reply = Reply.parse(parseLine(await this.nextLine(timeoutMs)));
      if ('error' in reply) throw new Error(`guest agent ${command} failed: ${reply.error.desc}`);
      return reply.return;
    };
    const result = this.queue.then(run, run);
    this.queue = result.catch(() => undefined);
    return result;
  }
}
