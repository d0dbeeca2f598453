import { spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, openSync, rmSync, type WriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import os from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { createLogger } from '../../src/util/logger.js';
import { startProcessGroup } from '../../src/devenv/process-group.js';
import { testGuestKernelCmdline, type TestGuest } from '../../src/devenv/test-guest.js';

/** The virtio-serial port name the test guest opens when up (VM-Operator's agent port). */
export const AGENT_PORT_NAME = 'org.jdrupes.vmop_agent.0';

export interface QemuExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A qemu started for a test: QMP on a unix socket, the serial console on its stdio. */
export interface TestQemu {
  /** Temporary directory holding the sockets and `console.log`; removed by stop(). */
  dir: string;
  qmpSocket: string;
  pid: number;
  /** Sends `signal` unless qemu has exited (its parent's handle: never another process). */
  kill(signal: NodeJS.Signals): void;
  console: SerialConsole;
  exited: Promise<QemuExit>;
  stderr(): string;
  /** Kills qemu (SIGKILL) if it still runs, waits for it and removes `dir`. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * Starts `qemu-system-x86_64 -accel tcg -machine q35` with `args` appended (a function of the
 * temporary directory when they name files there). With `paused`, qemu waits (-S) for `cont`, so a test
 * can connect QMP and wait for events before anything happens.
 */
export async function launchQemu(
  args: string[] | ((dir: string) => string[]),
  options: { paused?: boolean } = {},
): Promise<TestQemu> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vmop-qemu-'));
  const qmpSocket = path.join(dir, 'qmp.sock');
  // Should this test worker die without calling stop(), the group's reaper kills qemu and removes `dir`.
  const group = await startProcessGroup({
    name: 'test-qemu',
    removeDir: dir,
    logger: createLogger('test-qemu'),
  });
  const command = group.command('qemu-system-x86_64', [
    ...['-accel', 'tcg', '-machine', 'q35', '-nodefaults', '-no-user-config', '-display', 'none'],
    ...['-qmp', `unix:${qmpSocket},server=on,wait=off`, '-serial', 'stdio'],
    ...(options.paused ? ['-S'] : []),
    ...(typeof args === 'function' ? args(dir) : args),
  ]);
  const child = spawn(command.binary, command.args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const running = () => child.exitCode === null && child.signalCode === null;
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<QemuExit>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const serialConsole = new SerialConsole(
    child.stdin!,
    child.stdout!,
    // Opened now, not on a later tick: a test that stops qemu at once removes `dir` first, and a
    // stream still opening its file then fails with ENOENT outside any test (seen in CI, loaded).
    createWriteStream('', { fd: openSync(path.join(dir, 'console.log'), 'w') }),
  );
  serialConsole.failWhen(
    exited.then(
      ({ code, signal }) => `qemu exited (code ${code}, signal ${signal}); stderr: ${stderr.trim()}`,
    ),
  );
  try {
    await new Promise((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
  } catch (error) {
    await group.release();
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`qemu-system-x86_64 could not start: ${(error as Error).message}`);
  }
  return {
    dir,
    qmpSocket,
    pid: child.pid!,
    kill: (signal) => {
      if (running()) child.kill(signal);
    },
    console: serialConsole,
    exited,
    stderr: () => stderr,
    stop: async () => {
      if (running()) child.kill('SIGKILL');
      await exited;
      serialConsole.close();
      await group.release();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface TestGuestOptions {
  /** Extra kernel command line words, e.g. `vmop.powerbutton=ignore`. */
  cmdline?: string[];
  /** Extra qemu arguments (devices). */
  args?: string[];
  smp?: string;
  paused?: boolean;
}

/** Boots the test guest with 256 MiB, a balloon and the vmop agent's virtio-serial port (`agent.sock`). */
export function launchTestGuest(guest: TestGuest, options: TestGuestOptions = {}): Promise<TestQemu> {
  return launchQemu(
    (dir) => [
      ...['-m', '256M', '-smp', options.smp ?? '1'],
      ...[
        '-kernel',
        guest.kernel,
        '-initrd',
        guest.initrd,
        '-append',
        testGuestKernelCmdline(options.cmdline),
      ],
      ...['-device', 'virtio-balloon-pci,id=balloon0', '-device', 'virtio-serial-pci,id=virtio-serial0'],
      ...['-chardev', `socket,id=vmopagent,path=${path.join(dir, 'agent.sock')},server=on,wait=off`],
      ...['-device', `virtserialport,chardev=vmopagent,id=vmopagent0,name=${AGENT_PORT_NAME}`],
      ...(options.args ?? []),
    ],
    { paused: options.paused ?? false },
  );
}

/**
 * The guest's serial console: collects its output (carriage returns removed) and types lines into it.
 */
export class SerialConsole {
  private text = '';
  private failure: string | undefined;
  private readonly waiters = new Set<() => void>();
  private commands = 0;
  private readonly onOutput = (chunk: string) => {
    this.log.write(chunk);
    this.text += chunk.replaceAll('\r', '');
    for (const waiter of this.waiters) waiter();
  };

  /** `release` frees what the console reads from (e.g. its socket) on close(). */
  constructor(
    private readonly input: Writable,
    private readonly outputStream: Readable,
    private readonly log: WriteStream,
    private readonly release: () => void = () => undefined,
  ) {
    outputStream.setEncoding('utf8').on('data', this.onOutput);
  }

  /** Everything the console printed so far. */
  get output(): string {
    return this.text;
  }

  /** Makes waits fail at once (with `reason`) when `event` happens, e.g. qemu exiting. */
  failWhen(event: Promise<string>): void {
    void event.then((reason) => {
      this.failure = reason;
      for (const waiter of this.waiters) waiter();
    });
  }

  /**
   * Resolves with the first complete line equal to `pattern` (or matching it), looking at output from
   * character offset `from` on (default: all output so far).
   */
  waitForLine(
    pattern: string | RegExp,
    options: { from?: number; timeoutMs?: number } = {},
  ): Promise<string> {
    const timeoutMs = options.timeoutMs ?? 90_000;
    const matches = (line: string) => (typeof pattern === 'string' ? line === pattern : pattern.test(line));
    return new Promise((resolve, reject) => {
      // Each check reads only what came since the last one: a guest printing many lines in many
      // small chunks must not cost time quadratic in its output (that kept this process from
      // reading qemu's socket in time, and qemu then logged a refused character twice).
      let scanned = options.from ?? 0;
      const check = () => {
        const end = this.text.lastIndexOf('\n') + 1;
        if (end > scanned) {
          const line = this.text.slice(scanned, end).split('\n').find(matches);
          scanned = end;
          if (line !== undefined) return finish(() => resolve(line));
        }
        if (this.failure) finish(() => reject(this.error(`${this.failure} before ${pattern}`)));
      };
      const timer = setTimeout(
        () => finish(() => reject(this.error(`no console line ${pattern} within ${timeoutMs} ms`))),
        timeoutMs,
      );
      const finish = (settle: () => void) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        settle();
      };
      this.waiters.add(check);
      check();
    });
  }

  /** Types a line into the guest's shell. */
  type(line: string): void {
    this.input.write(`${line}\n`);
  }

  /** Runs a shell command in the guest and resolves with its exit status. */
  async run(command: string): Promise<number> {
    const token = `vmop-rc-${++this.commands}`;
    const from = this.text.length;
    this.type(`${command}; echo ${token}=$?`);
    const line = await this.waitForLine(new RegExp(`^${token}=\\d+$`), { from });
    return Number(line.slice(token.length + 1));
  }

  /** Runs a shell command in the guest and resolves with the lines it printed. */
  async capture(command: string): Promise<string[]> {
    const token = `vmop-out-${++this.commands}`;
    const from = this.text.length;
    // The markers are typed split by quotes: the terminal's echo of the typed line, broken by a
    // line the guest printed meanwhile, once left `vmop-out-3-end` alone on a line, and the
    // command's output was taken before it came.
    this.type(`echo ${token}-''begin; ${command}; echo ${token}-''end`);
    await this.waitForLine(`${token}-end`, { from });
    const lines = this.text.slice(from).split('\n');
    return lines.slice(lines.indexOf(`${token}-begin`) + 1, lines.indexOf(`${token}-end`));
  }

  close(): void {
    this.outputStream.off('data', this.onOutput);
    this.log.end();
    this.release();
  }

  private error(message: string): Error {
    const tail = this.text.split('\n').slice(-30).join('\n');
    return new Error(`${message}\n--- console (last 30 lines) ---\n${tail}`);
  }
}

export async function openConsole(
  socketPath: string,
  logFile: string,
): Promise<SerialConsole & { socket: net.Socket }> {
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const connection = net.connect(socketPath, () => resolve(connection)).once('error', reject);
  });
  // Opened now (see launchQemu): the caller may remove the log's directory right after.
  const log = createWriteStream('', { fd: openSync(logFile, 'w') });
  const console = new SerialConsole(socket, socket, log, () => socket.end()) as SerialConsole & {
    socket: net.Socket;
  };
  console.socket = socket;
  return console;
}

/** Waits until the guest's console log (kept by qemu even without a client) contains `text`. */
const CONSOLE_WAIT_MS = 120_000;

export async function waitForConsoleLog(logFile: string, text: string, timeoutMs = CONSOLE_WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const log = await readFile(logFile, 'utf8').catch(() => '');
    if (log.includes(text)) return;
    if (Date.now() > deadline)
      throw new Error(`console log lacks ${text} after ${timeoutMs} ms:\n${log.slice(-2000)}`);
    await sleep(100);
  }
}
