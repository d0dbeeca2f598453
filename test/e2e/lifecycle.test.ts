// End to end, everything real: `vmop dev up` (control plane, Redis, two managers, the node
// agent), a VM booting the test guest under TCG, runtime changes reaching the guest and coming
// back into status, graceful stops, guest power-offs, and a manager killed with SIGKILL.
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm, stat, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isAlive } from '../../src/util/process.js';
import { eventually } from '../support/eventually.js';
import { openConsole, waitForConsoleLog } from '../support/qemu.js';

const run = promisify(execFile);
const NAMESPACE = 'default';

interface DevState {
  supervisorPid: number;
  kubeconfig: string;
  redisUrl: string;
  managers: Array<{ pid: number }>;
  node: { pid: number; stateDir: string };
}

interface Vm {
  metadata: { generation: number };
  spec: { vm: { state: string } };
  status?: {
    phase?: string;
    cpus?: number;
    ram?: string;
    node?: string;
    conditions?: Array<{ type: string; status: string; reason: string }>;
    lastShutdown?: { guestInitiated: boolean; reason: string };
    runner?: { runId: string; seq: number };
  };
}

/** Files called `name` below `dir`, newest first. */
async function findFiles(dir: string, name: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  const found = entries.filter((e) => e.name === name).map((e) => path.join(e.parentPath, e.name));
  const withTimes = await Promise.all(
    found.map(async (file) => ({ file, mtime: (await stat(file)).mtimeMs })),
  );
  return withTimes.sort((a, b) => b.mtime - a.mtime).map((f) => f.file);
}

describe('vmop end to end', () => {
  let devDir: string;
  let state: DevState;
  const env = () => ({ ...process.env, VMOP_DEV_DIR: devDir });
  const vmop = async (...args: string[]) => (await run('bin/vmop', args, { env: env() })).stdout;
  const kubectl = async (args: string[], input?: string) => {
    const child = run('kubectl', ['--kubeconfig', state.kubeconfig, '-n', NAMESPACE, ...args]);
    child.child.stdin?.end(input ?? '');
    return (await child).stdout;
  };
  const getVm = async (name: string): Promise<Vm> =>
    JSON.parse(await kubectl(['get', 'vm', name, '-o', 'json']));
  const patchVm = (name: string, patch: object) =>
    kubectl(['patch', 'vm', name, '--type', 'merge', '-p', JSON.stringify({ spec: patch })]);
  const condition = (vm: Vm, type: string) => vm.status?.conditions?.find((c) => c.type === type);
  const waitForVm = (name: string, check: (vm: Vm) => void, timeoutMs = 180_000) =>
    eventually(
      async () => {
        const vm = await getVm(name);
        check(vm);
        return vm;
      },
      timeoutMs,
      500,
    );
  /** The serial console of the VM's current run (the node agent gives each pod a private /tmp). */
  const consoleOf = async (name: string) => {
    const logs = await eventually(async () => {
      const found = (await findFiles(state.node.stateDir, 'console.log')).filter((f) =>
        f.includes(`/${name}/`),
      );
      expect(found.length).toBeGreaterThan(0);
      return found;
    });
    // Unix socket paths are limited to 107 bytes; the pod's own path is longer, a link is short.
    const link = path.join(devDir, `console-${name}-${Date.now()}`);
    await symlink(path.dirname(logs[0]!), link);
    return { log: logs[0]!, socket: path.join(link, 'console.sock') };
  };
  /** Types `poweroff -f` on a booted guest's serial console, as a user logged in there would. */
  const powerOffFromInside = async (name: string) => {
    const guest = await consoleOf(name);
    await waitForConsoleLog(guest.log, 'VMOP-GUEST-READY');
    const console = await openConsole(guest.socket, path.join(devDir, `${name}-console.log`));
    console.type('poweroff -f');
    console.close();
  };
  const eventReasons = async (name: string): Promise<string[]> => {
    const events = await kubectl([
      'get',
      'events',
      '--field-selector',
      `involvedObject.name=${name}`,
      '-o',
      'json',
    ]);
    return JSON.parse(events).items.map((e: { reason: string }) => e.reason);
  };
  const applyVm = (name: string, spicePort: number, extra = '') =>
    kubectl(
      ['apply', '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${NAMESPACE}}
spec:
  runnerTemplate: {source: test-guest.liquid}
${extra}
  vm:
    state: Running
    maximumCpus: 2
    currentCpus: 1
    maximumRam: 256Mi
    currentRam: 256Mi
    powerdownTimeout: 60
    networks: []
    display: {spice: {port: ${spicePort}}}
`,
    );

  beforeAll(async () => {
    devDir = await mkdtemp(path.join(os.tmpdir(), 'vmop-e2e-'));
    state = JSON.parse(await vmop('dev', 'up', '-o', 'json'));
    expect(state).toMatchObject({
      kubeconfig: expect.any(String),
      redisUrl: expect.stringMatching(/^redis:\/\//),
    });
  }, 900_000);

  afterAll(async () => {
    if (!state) return;
    await vmop('dev', 'down');
    const pids = [state.supervisorPid, state.node.pid, ...state.managers.map((m) => m.pid)];
    expect(pids.filter(isAlive)).toEqual([]);
    const { stdout } = await run('pgrep', ['-f', devDir]).catch(() => ({ stdout: '' }));
    expect(stdout.trim()).toBe(''); // no runner or qemu of this environment is left
    await rm(devDir, { recursive: true, force: true });
  }, 300_000);

  it('`vmop dev up` is idempotent and `status -o json` says where things are', async () => {
    const again = JSON.parse(await vmop('dev', 'up', '-o', 'json'));
    expect(again.supervisorPid).toBe(state.supervisorPid);
    const status = JSON.parse(await vmop('dev', 'status', '-o', 'json'));
    expect(status).toMatchObject({ kubeconfig: state.kubeconfig, redisUrl: state.redisUrl });
  });

  it("boots the README's example VM (with a provisioned disk)", async () => {
    await kubectl(['apply', '-f', 'examples/test-guest.yaml']);
    const vm = await waitForVm('test-guest', (vm) => expect(condition(vm, 'Booted')?.status).toBe('True'));
    expect(vm.status).toMatchObject({ phase: 'Running', cpus: 1, ram: '256Mi' });
    expect(await kubectl(['get', 'pvc', 'data-disk-test-guest-0', '-o', 'jsonpath={.status.phase}'])).toBe(
      'Bound',
    );
    await kubectl(['delete', 'vm', 'test-guest', '--wait=false']);
  });

  it('boots a VM: status Running and Booted, with the CPUs and RAM of the spec', async () => {
    await applyVm('e2e', 5931);
    const vm = await waitForVm('e2e', (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(condition(vm, 'Booted')?.status).toBe('True');
    });
    expect(vm.status).toMatchObject({ cpus: 1, ram: '256Mi', node: expect.any(String) });
    await waitForConsoleLog((await consoleOf('e2e')).log, 'VMOP-GUEST-READY');
  });

  it('currentRam: the guest balloon shrinks and status.ram follows', async () => {
    await patchVm('e2e', { vm: { currentRam: '192Mi' } });
    await waitForVm('e2e', (vm) => expect(vm.status?.ram).toBe('192Mi'));
  });

  it('a manager killed with SIGKILL: the other replica carries on (currentCpus 1→2 reaches the guest)', async () => {
    process.kill(state.managers[0]!.pid, 'SIGKILL');
    await patchVm('e2e', { vm: { currentCpus: 2 } });
    await waitForConsoleLog((await consoleOf('e2e')).log, 'vmop-guest: cpu1 online');
    await waitForVm('e2e', (vm) => expect(vm.status?.cpus).toBe(2));
  });

  it('state Stopped: the guest gets the power button, shuts itself down, the pod goes, status Stopped', async () => {
    await patchVm('e2e', { vm: { state: 'Stopped' } });
    const vm = await waitForVm('e2e', (vm) => expect(vm.status?.phase).toBe('Stopped'));
    expect(vm.status?.lastShutdown).toMatchObject({ guestInitiated: true, reason: 'guest-shutdown' });
    await eventually(() => expect(kubectl(['get', 'pod', 'e2e-0'])).rejects.toThrow(/NotFound/));
    expect(await eventReasons('e2e')).toEqual(expect.arrayContaining(['Started', 'StoppedByRequest']));
  });

  it('guestShutdownStops false: a guest that powers itself off boots again', async () => {
    await applyVm('reboots', 5932);
    const first = await waitForVm('reboots', (vm) => expect(condition(vm, 'Booted')?.status).toBe('True'));
    await powerOffFromInside('reboots');
    const again = await waitForVm('reboots', (vm) => {
      expect(vm.status?.runner?.runId).not.toBe(first.status?.runner?.runId);
      expect(condition(vm, 'Booted')?.status).toBe('True');
    });
    expect(again.spec.vm.state).toBe('Running');
    expect(again.status?.lastShutdown).toMatchObject({ guestInitiated: true });
    await kubectl(['delete', 'vm', 'reboots', '--wait=false']);
  });

  it('guestShutdownStops true: a guest that powers itself off stays off, and spec says Stopped', async () => {
    await applyVm('stays-off', 5933, '  guestShutdownStops: true');
    await waitForVm('stays-off', (vm) => expect(condition(vm, 'Booted')?.status).toBe('True'));
    await powerOffFromInside('stays-off');
    const vm = await waitForVm('stays-off', (vm) => {
      expect(vm.spec.vm.state).toBe('Stopped');
      expect(vm.status?.phase).toBe('Stopped');
    });
    expect(vm.status?.lastShutdown).toMatchObject({ guestInitiated: true, reason: 'guest-shutdown' });
    await eventually(() => expect(kubectl(['get', 'pod', 'stays-off-0'])).rejects.toThrow(/NotFound/));
    expect(await eventReasons('stays-off')).toContain('StoppedByGuest');
  });
});
