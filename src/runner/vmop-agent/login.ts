// VM-Operator's auto-login: the runner tells the vmop agent in the guest (on the virtio-serial port
// org.jdrupes.vmop_agent.0) `login <user>` or `logout`; the agent answers in lines starting with
// three digits: 220 it started, 201 logged in, 202 logged out (VM-Operator's auto-login.md).
import { connect, type Socket } from 'node:net';
import type { Logger } from '../../util/logger.js';

const RECONNECT_MS = 1_000;

export class AgentLogin {
  private socket?: Socket;
  private closed = false;
  /** Who should be logged in (the config's display.loggedInUser). */
  private wanted?: string;
  /** Who the agent said is logged in. */
  private current?: string;
  /** The command sent and not answered yet. */
  private pending?: { command: 'login' | 'logout'; user?: string };
  private buffered = '';

  constructor(
    private readonly socketPath: string,
    /** Whether the guest has opened the agent's port (a runner that reconnects sees no 220). */
    private readonly agentListens: () => boolean,
    private readonly onLoggedIn: (user: string | undefined) => void,
    private readonly logger: Logger,
  ) {
    this.connect();
  }

  setUser(user: string | undefined) {
    this.wanted = user;
    this.sync();
  }

  /** The guest opened (or closed) the agent's port. */
  portChanged(open: boolean) {
    if (!open) this.pending = undefined;
    else this.sync();
  }

  close() {
    this.closed = true;
    this.socket?.destroy();
  }

  private connect() {
    if (this.closed) return;
    const socket = connect(this.socketPath);
    socket.setEncoding('utf8');
    socket.on('connect', () => {
      this.socket = socket;
      this.sync();
    });
    socket.on('data', (chunk: string) => this.received(chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      if (this.socket === socket) this.socket = undefined;
      this.pending = undefined;
      setTimeout(() => this.connect(), RECONNECT_MS).unref();
    });
  }

  private received(chunk: string) {
    this.buffered += chunk;
    const lines = this.buffered.split('\n');
    this.buffered = lines.pop() ?? '';
    for (const line of lines) {
      const code = line.slice(0, 3);
      if (code === '220') {
        // A (re)started agent: nobody is logged in.
        this.pending = undefined;
        this.loggedIn(undefined);
      } else if (code === '201' && this.pending?.command === 'login') {
        const user = this.pending.user;
        this.pending = undefined;
        this.loggedIn(user);
      } else if (code === '202') {
        this.pending = undefined;
        this.loggedIn(undefined);
      } else if (/^[45]\d\d/.test(line)) {
        this.logger.warn({ answer: line.trim(), command: this.pending?.command }, 'the vmop agent refused');
        this.pending = undefined;
        continue; // not again and again: the next config change tries anew
      }
      this.sync();
    }
  }

  private loggedIn(user: string | undefined) {
    if (user === this.current) return;
    this.current = user;
    this.onLoggedIn(user);
  }

  private sync() {
    if (!this.socket || this.pending || this.wanted === this.current || !this.agentListens()) return;
    // Another user: the one logged in leaves first.
    if (this.current !== undefined) this.send({ command: 'logout' });
    else if (this.wanted !== undefined) this.send({ command: 'login', user: this.wanted });
  }

  private send(pending: { command: 'login' | 'logout'; user?: string }) {
    this.pending = pending;
    this.socket!.write(pending.command === 'login' ? `login ${pending.user}\n` : 'logout\n');
    this.logger.info({ command: pending.command, user: pending.user }, 'told the vmop agent');
  }
}
