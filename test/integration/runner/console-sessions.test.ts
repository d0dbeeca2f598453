// The serial console's sessions with a real runner and qemu (issue 52): each session is a relay
// (`vmop serial-console`, what `vmop vm console` and the GUI run in the pod) connected to the
// runner's hub. Nothing is signalled to take a console over, two sessions opened together leave one,
// a terminal's hang-up ends its relay alone, and SIGUSR1 opens no debugger in the runner. Last, a
// qemu stopped by a signal from outside: the runner says who sent it.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import { VMOP_BIN } from '../../../src/devenv/vmop-bin.js';
import { TAKEN_OVER_MESSAGE } from '../../../src/console/serial-hub.js';
import { GO, RELAY_ASKS } from '../../../src/console/relay-go.js';
import { bystander, type Bystander } from '../../support/recycled-pid.js';
import { eventually } from '../../support/eventually.js';
import {
  configYaml,
  makeImageRepository,
  makeTempDir,
  processRef,
  ProjectedVolume,
  signalProcess,
  startRunner,
  waitForConsoleLog,
  type RunnerProcess,
} from './harness.js';

interface Relay {
  child: ChildProcess;
  output(): string;
  type(line: string): void;
  running(): boolean;
  exited: Promise<number | null>;
}

/** The TCP sockets `pid` listens on (its descriptors' inodes among /proc/net/tcp{,6}'s LISTEN rows). */
async function listeningSockets(pid: number): Promise<string[]> {
  const inodes = new Set<string>();
  for (const fd of await readdir(`/proc/${pid}/fd`)) {
    const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
    if (inode) inodes.add(inode);
  }
  const listening: string[] = [];
  for (const table of ['tcp', 'tcp6']) {
    const rows = (await readFile(`/proc/${pid}/net/${table}`, 'utf8')).split('\n').slice(1);
    for (const row of rows) {
      const fields = row.trim().split(/\s+/);
      // local_address, …, st (0A: LISTEN), …, inode
      if (fields[3] === '0A' && inodes.has(fields[9]!)) listening.push(`${table} ${fields[1]}`);
    }
  }
  return listening;
}

/** The relay processes (wherever they run, e.g. under a terminal) for the runner config `config`. */
async function relaysOf(config: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of (await readdir('/proc')).filter((name) => /^\d+$/.test(name))) {
    const argv = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (argv.includes(`\0serial-console\0--config\0${config}`)) found.push(Number(entry));
  }
  return found;
}

describe('runner: serial console sessions', () => {
  let tmp: string;
  let configFile: string;
  let runner: RunnerProcess;
  let stranger: Bystander | undefined;
  const relays: ChildProcess[] = [];
  const runDir = () => path.join(tmp, 'run');

  const startRelay = (wrap: (argv: string[]) => string[] = (argv) => argv): Relay => {
    const argv = wrap([VMOP_BIN, 'serial-console', '--config', configFile]);
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    relays.push(child);
    let output = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk.replaceAll('\r', '')));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const exited = once(child, 'exit').then(([code]) => code as number | null);
    return {
      child,
      output: () => output,
      type: (line) => child.stdin!.write(`${line}\n`),
      running: () => child.exitCode === null && child.signalCode === null,
      exited,
    };
  };
  /** Types a sum into the guest through `relay` and waits for the answer to come back through it. */
  const answers = async (relay: Relay, token: string) => {
    relay.type(`echo ${token}-$((6*7))`);
    await eventually(() => expect(relay.output()).toContain(`${token}-42`), 60_000);
  };

  beforeAll(async () => {
    tmp = await makeTempDir('runner-console');
    const config: RunnerConfigInput = {
      '/Runner': {
        dataDir: path.join(tmp, 'data'),
        runtimeDir: runDir(),
        template: 'test-guest.liquid',
        imageRepository: await makeImageRepository(path.join(tmp, 'images')),
        vm: { name: 'consoles', maximumRam: '256Mi', network: [{ type: 'user' }], powerdownTimeout: 30 },
      },
    };
    const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), { 'config.yaml': configYaml(config) });
    configFile = volume.file('config.yaml');
    runner = await startRunner(configFile);
    await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
  });
  afterAll(async () => {
    for (const child of relays)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await runner?.stop();
    await stranger?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  it('a session file of earlier vmop naming another process: a relay signals nobody, replays and relays', async () => {
    stranger = await bystander(path.join(tmp, 'stranger-signals'));
    // What the relays of stop 50 wrote, and signalled whatever process then had that pid.
    await writeFile(path.join(runDir(), 'console.session'), String(stranger.ref.pid));
    const relay = startRelay();
    await eventually(() => expect(relay.output()).toContain('VMOP-GUEST-READY'), 30_000); // the replay
    await answers(relay, 'first');
    relay.child.stdin!.end();
    expect(await relay.exited).toBe(0);
    expect(stranger.running()).toBe(true);
    expect(stranger.signals()).toEqual([]);
  });

  it('two relays started at the same instant: exactly one remains and relays, the other is told; nothing is left behind', async () => {
    const before = (await readdir(runDir())).sort();
    const [a, b] = [startRelay(), startRelay()];
    const displaced = await Promise.race([a.exited.then(() => a), b.exited.then(() => b)]);
    const remaining = displaced === a ? b : a;
    expect(displaced.output()).toContain(TAKEN_OVER_MESSAGE);
    await sleep(1_000);
    expect(remaining.running()).toBe(true);
    await answers(remaining, 'second');
    remaining.child.stdin!.end();
    expect(await remaining.exited).toBe(0);
    expect((await readdir(runDir())).sort()).toEqual(before);
  });

  it('a relay that asks first: one whose client is gone leaves the console to its holder; one told go takes it over', async () => {
    const askFirst = (argv: string[]) => [...argv, '--ask-first'];
    const holder = startRelay();
    await answers(holder, 'held');
    // A page closed before its relay started: the relay asks, finds its stdin ended, and goes.
    const late = startRelay(askFirst);
    await eventually(() => expect(late.output()).toContain(RELAY_ASKS), 30_000);
    late.child.stdin!.end();
    expect(await late.exited).toBe(0);
    expect(holder.running()).toBe(true);
    await answers(holder, 'kept');
    // Keys typed before the answer reach the guest after it.
    const next = startRelay(askFirst);
    await eventually(() => expect(next.output()).toContain(RELAY_ASKS), 30_000);
    next.child.stdin!.write(Buffer.concat([Buffer.of(GO), Buffer.from('echo early-$((6*7))\n')]));
    await eventually(() => expect(next.output()).toContain('early-42'), 60_000);
    expect(await holder.exited).toBe(0);
    expect(holder.output()).toContain(TAKEN_OVER_MESSAGE);
    next.child.stdin!.end();
    expect(await next.exited).toBe(0);
  });

  it("a new session's replay holds the guest's output without its questions to the terminal, which would answer them at the prompt", async () => {
    const asker = startRelay();
    await answers(asker, 'before-asking');
    // What a shell's line editor sends: cursor position and device attribute queries.
    asker.type(`printf 'asked\\033[6n\\033[c-%s\\n' done`);
    await eventually(() => expect(asker.output()).toContain('asked\x1b[6n\x1b[c-done'), 60_000);
    const next = startRelay();
    await eventually(() => expect(next.output()).toContain('asked-done'), 30_000);
    expect(next.output()).not.toContain('\x1b[6n');
    expect(await asker.exited).toBe(0);
    next.child.stdin!.end();
    expect(await next.exited).toBe(0);
  });

  it("a hang-up of a relay's terminal ends that relay and nothing else", async () => {
    const qemuBefore = processRef(runner.snapshots().at(-1)!.qemuPid!)!;
    // The relay on a terminal of its own (script's pty): killing script closes the terminal.
    const relay = startRelay((argv) => ['script', '-qfec', argv.map((a) => `'${a}'`).join(' '), '/dev/null']);
    await eventually(() => expect(relay.output()).toContain('VMOP-GUEST-READY'), 30_000);
    relay.child.kill('SIGKILL');
    await eventually(async () => expect(await relaysOf(configFile)).toEqual([]), 20_000);
    expect(processRef(qemuBefore.pid)).toEqual(qemuBefore);
    expect(runner.running()).toBe(true);
    const next = startRelay();
    await answers(next, 'third');
    next.child.stdin!.end();
    await next.exited;
  });

  it('SIGUSR1 to the runner opens no debugger: it listens on nothing and runs on', async () => {
    runner.kill('SIGUSR1');
    await sleep(1_000);
    expect(runner.running()).toBe(true);
    expect(await listeningSockets(runner.pid)).toEqual([]);
    expect(runner.logTail()).not.toContain('Debugger listening');
  });

  it('qemu stopped by a signal from outside: the runner keeps what qemu said of the sender', async () => {
    const qemu = processRef(runner.snapshots().at(-1)!.qemuPid!)!;
    expect(signalProcess(qemu, 'SIGTERM')).toBe(true);
    await runner.exited;
    const last = runner.snapshots().at(-1)!;
    expect(last.lastShutdown, runner.logTail()).toMatchObject({
      guest: false,
      reason: 'host-signal',
      qemuSays: expect.stringMatching(new RegExp(`terminating on signal 15 from pid ${process.pid} \\(`)),
    });
  });
});
