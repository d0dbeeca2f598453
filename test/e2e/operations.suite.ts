// The VM lifecycle of seeds 003/004 end to end on `vmop dev` (kubelet, containerd, TCG guests):
// every cell of the README's run-policy table, every operation type through `vmop vm` (and the
// kubectl plugin), changes that wait for a restart under Manual and Automatic approval.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { useDevBed } from '../support/beds.js';
import { testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { qemuProcess, signalRecorded } from '../support/qemu-process.js';
import { RUN_MARKER_PREFIX } from '../../src/runner/serial-log.js';

const run = promisify(execFile);
const NAMESPACE = 'operations';
const READY = 'VMOP-GUEST-READY';

describe('VM lifecycle: run policies, operations, restart-awaiting changes', () => {
  const bed = useDevBed('dev', { namespaces: [NAMESPACE] });
  let vms: ClusterVms;
  // `vmop vm` and the kubectl plugin as a user runs them, in the file's namespace.
  const env = () => bed.env(NAMESPACE);
  /** `vmop vm …` as a user runs it: exit code, stdout and stderr. */
  const vmopVm = async (...args: string[]) => {
    try {
      const { stdout, stderr } = await run('bin/vmop', ['vm', ...args], { env: env() });
      return { code: 0, stdout, stderr };
    } catch (err) {
      const failed = err as { code: number; stdout: string; stderr: string };
      return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
    }
  };
  const applyVm = (name: string, extraSpec: string, state = 'Running') =>
    vms.apply(testGuestManifest(name, NAMESPACE, { extraSpec }).replace('state: Running', `state: ${state}`));
  const bootedRun = (name: string, notRunId?: string) =>
    vms.waitForVm(name, (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
      if (notRunId) expect(vm.status?.runner?.runId).not.toBe(notRunId);
    });
  const stoppedForGood = (name: string) =>
    vms.waitForVm(name, (vm) => {
      expect(vm.spec.vm.state).toBe('Stopped');
      expect(vm.status?.phase).toBe('Stopped');
    });
  const readyCount = async (name: string) => (await vms.consoleLog(name)).split(READY).length - 1;
  /** SIGKILL to the VM's qemu on this bed's node (beds run side by side: never machine-wide). */
  const killQemu = async (name: string) => {
    const qemu = await qemuProcess(name, bed.state().nodeServices[0]!.cgroupRoot);
    if (!qemu) throw new Error(`no qemu of ${name} on the node`);
    signalRecorded(qemu);
  };
  const podUid = async (name: string) => vms.kubectl(['get', 'pod', name, '-o', 'jsonpath={.metadata.uid}']);
  /** The README's row "the guest reboots": under every policy, the same runner pod and qemu boot it again. */
  const rebootsInPlace = async (name: string) => {
    await vms.waitForConsole(name, READY);
    const before = await vms.getVm(name);
    const [pod, boots] = [await podUid(name), await readyCount(name)];
    await vms.typeOnConsole(name, 'reboot -f');
    await eventually(async () => expect(await readyCount(name)).toBe(boots + 1), 120_000);
    const after = await bootedRun(name);
    expect(after.status?.runner?.runId).toBe(before.status?.runner?.runId);
    expect(await podUid(name)).toBe(pod);
    expect(after.spec.vm.state).toBe('Running');
    expect(after.status?.runnerRestarts).toBe(before.status?.runnerRestarts);
  };

  beforeAll(() => {
    vms = bed.vms(NAMESPACE);
  });

  describe('runPolicy Manual', () => {
    it('created Stopped it stays off; `vmop vm start --wait` starts it', async () => {
      await applyVm('manual', '  runPolicy: Manual', 'Stopped');
      await vms.waitForVm('manual', (vm) => expect(vm.status?.phase).toBe('Stopped'));
      const started = await vmopVm('start', 'manual', '--wait');
      expect(started).toMatchObject({ code: 0 });
      expect(started.stdout).toMatch(
        /virtualmachineoperation\/manual-start-\w+ created \(Start operations\/manual\)/,
      );
      expect(started.stdout).toMatch(/manual-start-\w+: Completed \(the VM runs on /);
      await bootedRun('manual');
      await vms.waitForConsole('manual', READY);
    });

    it('Reset: the guest boots again in the same qemu', async () => {
      const before = await vms.getVm('manual');
      const reset = await vmopVm('reset', 'manual', '--wait');
      expect(reset).toMatchObject({
        code: 0,
        stdout: expect.stringMatching(/Completed \(the guest was reset\)/),
      });
      await eventually(async () => expect(await readyCount('manual')).toBe(2), 120_000);
      const after = await vms.getVm('manual');
      expect(after.status?.runner?.runId).toBe(before.status?.runner?.runId);
      expect(after.status?.lastReset?.request).toMatch(/^manual-reset-/);
    });

    it('a reboot inside the guest stays in the same runner and qemu (no restart)', async () => {
      await rebootsInPlace('manual');
    });

    it('Restart: a new runner pod runs the VM; the serial log of the earlier run stays', async () => {
      const before = await podUid('manual');
      const earlierRun = (await vms.getVm('manual')).status?.runner?.runId;
      const restarted = await vmopVm('restart', 'manual', '--wait');
      expect(restarted).toMatchObject({ code: 0 });
      expect(restarted.stdout).toMatch(/Completed \(the VM runs again, in a new runner pod/);
      expect(await podUid('manual')).not.toBe(before);
      const vm = await bootedRun('manual');
      await vms.waitForConsole('manual', READY);
      // The log is in the runner-data volume: the earlier run (three boots) comes before the new one.
      const whole = await vms.wholeConsoleLog('manual');
      const newRun = whole.indexOf(`${RUN_MARKER_PREFIX}${vm.status?.runner?.runId} started at `);
      expect(whole.indexOf(`${RUN_MARKER_PREFIX}${earlierRun} started at `)).toBeGreaterThanOrEqual(0);
      expect(whole.slice(0, newRun).split(READY).length - 1).toBe(3);
    });

    it('the guest powers off: the VM stays off', async () => {
      await vms.waitForConsole('manual', READY);
      await vms.typeOnConsole('manual', 'poweroff -f');
      await stoppedForGood('manual');
      expect(await vms.eventMessages('manual')).toContain(
        'StoppedByGuest: the guest powered itself off; the VM stays off',
      );
    });

    it('qemu crashes: the VM stays off, the failure in an Event', async () => {
      expect((await vmopVm('start', 'manual', '--wait')).code).toBe(0);
      await bootedRun('manual');
      await killQemu('manual');
      await stoppedForGood('manual');
      const messages = await vms.eventMessages('manual');
      expect(
        messages.some((m: string) =>
          /^StoppedAfterFailure: .*killed by SIGKILL.*; runPolicy Manual keeps the VM off$/.test(m),
        ),
      ).toBe(true);
    });

    it('the runner pod is deleted: the VM stays off', async () => {
      expect((await vmopVm('start', 'manual', '--wait')).code).toBe(0);
      await bootedRun('manual');
      await vms.kubectl(['delete', 'pod', 'manual', '--wait=false']);
      await stoppedForGood('manual');
      const messages = await vms.eventMessages('manual');
      expect(messages.some((m: string) => m.startsWith('RunnerLost: the runner pod'))).toBe(true);
    });

    it('Stop with --force on a running VM', async () => {
      expect((await vmopVm('start', 'manual', '--wait')).code).toBe(0);
      await bootedRun('manual');
      const stopped = await vmopVm('stop', 'manual', '--force', '--wait');
      expect(stopped.stdout).toMatch(/Completed \(the VM is stopped\)/);
      await vms.kubectl(['delete', 'vm', 'manual', '--wait=false']);
    });

    it('created Running: it runs', async () => {
      await applyVm('manual-running', '  runPolicy: Manual');
      const vm = await bootedRun('manual-running');
      expect(vm.spec.vm.state).toBe('Running');
      await vms.kubectl(['delete', 'vm', 'manual-running', '--wait=false']);
    });
  });

  describe('no runPolicy (VM-Operator)', () => {
    it('a reboot inside the guest stays in the same runner and qemu', async () => {
      await applyVm('no-policy', '');
      await bootedRun('no-policy');
      await rebootsInPlace('no-policy');
    });

    it('the runner pod is deleted: a new pod runs it', async () => {
      const before = await podUid('no-policy');
      const runId = (await vms.getVm('no-policy')).status?.runner?.runId;
      await vms.kubectl(['delete', 'pod', 'no-policy']);
      await eventually(async () => expect(await podUid('no-policy')).not.toBe(before), 120_000);
      const vm = await bootedRun('no-policy', runId);
      expect(vm.spec.vm.state).toBe('Running');
    });

    it('Stop: state Stopped, the guest powered down', async () => {
      const stopped = await vmopVm('stop', 'no-policy', '--wait');
      expect(stopped).toMatchObject({ code: 0 });
      expect(stopped.stdout).toMatch(/Completed \(the VM is stopped\)/);
      const vm = await stoppedForGood('no-policy');
      expect(vm.status?.lastShutdown).toMatchObject({ guestInitiated: true });
      await vms.kubectl(['delete', 'vm', 'no-policy', '--wait=false']);
    });
  });

  describe('force: a guest that ignores the power button and the guest agent', () => {
    const POWERDOWN_TIMEOUT = 600;
    /** Makes the guest deaf to ACPI and to the agent's shutdown, as a hung or stubborn OS would be. */
    const makeStubborn = async (name: string) => {
      await vms.waitForConsole(name, READY);
      await vms.typeOnConsole(name, 'touch /run/vmop-ignore-powerbutton; echo stubborn-$((40+2))');
      await vms.waitForConsole(name, 'stubborn-42');
    };
    const secondsBetween = (from: string | undefined, to: string | undefined) =>
      (Date.parse(to ?? '') - Date.parse(from ?? '')) / 1000;
    const operation = async (name: string, type: string) => {
      const ops = JSON.parse(await vms.kubectl(['get', 'vmop', '-o', 'json'])).items as Array<{
        spec: { virtualMachineName: string; type: string };
        status: { phase: string; signalledAt?: string; completedAt?: string };
      }>;
      return ops.filter((op) => op.spec.virtualMachineName === name && op.spec.type === type).at(-1)!;
    };

    it(`Restart --force and Stop --force do not wait out powerdownTimeout (${POWERDOWN_TIMEOUT} s)`, async () => {
      await vms.apply(
        testGuestManifest('stubborn', NAMESPACE, { extraSpec: '', powerdownTimeout: POWERDOWN_TIMEOUT }),
      );
      const first = await bootedRun('stubborn');
      await makeStubborn('stubborn');
      const restarted = await vmopVm('restart', 'stubborn', '--force', '--wait');
      expect(restarted).toMatchObject({ code: 0 });
      await bootedRun('stubborn', first.status?.runner?.runId);
      const restart = await operation('stubborn', 'Restart');
      expect(restart.status.phase).toBe('Completed');
      // Seconds (kubelet's 1 s grace, a new pod, a TCG boot), not the ten minutes a graceful stop would wait.
      expect(secondsBetween(restart.status.signalledAt, restart.status.completedAt)).toBeLessThan(
        POWERDOWN_TIMEOUT / 4,
      );

      await makeStubborn('stubborn');
      const stopped = await vmopVm('stop', 'stubborn', '--force', '--wait');
      expect(stopped.stdout).toMatch(/Completed \(the VM is stopped\)/);
      const stop = await operation('stubborn', 'Stop');
      expect(secondsBetween(stop.status.signalledAt, stop.status.completedAt)).toBeLessThan(
        POWERDOWN_TIMEOUT / 4,
      );
      const vm = await stoppedForGood('stubborn');
      expect(vm.status?.lastShutdown?.guestInitiated).not.toBe(true); // the guest never agreed
      await vms.kubectl(['delete', 'vm', 'stubborn', '--wait=false']);
    });
  });

  describe('runPolicy AlwaysOnUnlessStoppedManually', () => {
    it('qemu crashes: it runs again', async () => {
      await applyVm('aousm', '  runPolicy: AlwaysOnUnlessStoppedManually');
      const first = await bootedRun('aousm');
      await killQemu('aousm');
      await bootedRun('aousm', first.status?.runner?.runId);
    });

    it("qemu stopped by a signal sent in its pod: it runs again, the Event and condition say who sent it in qemu's words, and the suite's guard would fail the test", async () => {
      const before = await bootedRun('aousm');
      // By hand, as someone with exec rights in the pod might: a shell there sends qemu SIGTERM.
      await vms
        .kubectl([
          ...['exec', 'aousm', '-c', 'runner', '--', 'sh', '-c'],
          // The shell waits a moment: qemu names its sender from /proc, and one gone is "<unknown process>".
          'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = qemu-system-x86 ] && kill -TERM ${p#/proc/}; done; sleep 2',
        ])
        // The runner ends with its qemu and the container restarts, killing the shell (137).
        .catch((err: { message: string }) => {
          if (!/exit code 137/.test(err.message)) throw err;
        });
      const sender = /terminating on signal 15 from pid \d+ \(sh\)/;
      const stopped = await eventually(async () => {
        const message = (await vms.eventMessages('aousm')).find((m) => m.startsWith('StoppedByHost:'));
        expect(message).toMatch(sender);
        return message!;
      }, 60_000);
      expect(stopped).toContain('qemu stopped (host-signal: ');
      const found = await bed.qemuSignalsNobodySent();
      expect(found).toEqual([
        expect.stringContaining(`VM ${NAMESPACE}/aousm was stopped by a signal no test sent`),
      ]);
      expect(found[0]).toMatch(sender);
      const vm = await bootedRun('aousm', before.status?.runner?.runId);
      expect(vm.status?.lastShutdown).toMatchObject({
        reason: 'host-signal',
        qemuSays: expect.stringMatching(sender),
      });
    });

    it('the runner pod is deleted: it runs again in a new one', async () => {
      const before = await podUid('aousm');
      await vms.kubectl(['delete', 'pod', 'aousm']);
      await eventually(async () => expect(await podUid('aousm')).not.toBe(before), 120_000);
      const vm = await bootedRun('aousm');
      expect(vm.spec.vm.state).toBe('Running');
    });

    it('a reboot inside the guest stays in the same runner and qemu', async () => {
      await rebootsInPlace('aousm');
    });

    it('the guest powers off: it stays off; Start starts it, Stop stops it', async () => {
      await vms.waitForConsole('aousm', READY);
      await vms.typeOnConsole('aousm', 'poweroff -f');
      await stoppedForGood('aousm');
      expect((await vmopVm('start', 'aousm', '--wait')).code).toBe(0);
      await bootedRun('aousm');
      const stop = await vmopVm('stop', 'aousm', '--wait');
      expect(stop.stdout).toMatch(/Completed/);
      await stoppedForGood('aousm');
      await vms.kubectl(['delete', 'vm', 'aousm', '--wait=false']);
    });
  });

  describe('runPolicy AlwaysOn and AlwaysOff', () => {
    it('AlwaysOn: guest power-off, qemu crash and pod deletion all end with the VM running again', async () => {
      await applyVm('always-on', '  runPolicy: AlwaysOn');
      await bootedRun('always-on');
      await rebootsInPlace('always-on');
      let vm = await bootedRun('always-on');
      await vms.waitForConsole('always-on', READY);
      await vms.typeOnConsole('always-on', 'poweroff -f');
      vm = await bootedRun('always-on', vm.status?.runner?.runId);
      await killQemu('always-on');
      vm = await bootedRun('always-on', vm.status?.runner?.runId);
      await vms.kubectl(['delete', 'pod', 'always-on']);
      vm = await bootedRun('always-on', vm.status?.runner?.runId);
      expect(vm.spec.vm.state).toBe('Running');
    });

    it('AlwaysOn: Stop and Start fail at once with the policy as reason; Migrate fails with no other node; Evict works', async () => {
      for (const verb of ['stop', 'start']) {
        const refused = await vmopVm(verb, 'always-on', '--wait');
        expect(refused.code).toBe(1);
        expect(refused.stderr).toMatch(
          new RegExp(
            `Failed \\(${verb[0]!.toUpperCase()}${verb.slice(1)} is not applicable to a VM with runPolicy AlwaysOn\\)`,
          ),
        );
      }
      const before = await podUid('always-on');
      // One node: Migrate is refused with the reason, and the VM is left as it was.
      const runId = (await vms.getVm('always-on')).status?.runner?.runId;
      const migrate = await vmopVm('migrate', 'always-on', '--wait');
      expect(migrate.code).toBe(1);
      expect(migrate.stderr).toMatch(
        /Failed \(no other node is ready to take the VM \(it runs on [\w-]+\)\)/,
      );
      expect(await podUid('always-on')).toBe(before);
      expect((await vms.getVm('always-on')).status).toMatchObject({ phase: 'Running', runner: { runId } });
      const evicted = await vmopVm('evict', 'always-on', '--wait');
      // One node: it cannot move live, so it moves cold, and the operation says why.
      expect(evicted.stdout).toMatch(
        /Completed \(moved cold, as no other node is ready to take the VM \(it runs on [\w-]+\): the VM runs again, in a new runner pod/,
      );
      expect(await podUid('always-on')).not.toBe(before);
      await vms.kubectl(['delete', 'vm', 'always-on', '--wait=false']);
    });

    it('AlwaysOff: nothing runs, and Start and Stop are refused', async () => {
      await applyVm('always-off', '  runPolicy: AlwaysOff', 'Stopped');
      await vms.waitForVm('always-off', (vm) => expect(vm.status?.phase).toBe('Stopped'));
      for (const verb of ['start', 'stop']) {
        const refused = await vmopVm(verb, 'always-off');
        const type = `${verb[0]!.toUpperCase()}${verb.slice(1)}`;
        expect(refused.code).toBe(1);
        expect(refused.stderr).toContain(`${type} is not applicable to a VM with runPolicy AlwaysOff`);
        const ops = await vms.kubectl(['get', 'vmop', '-o', 'wide']);
        expect(ops).toMatch(
          new RegExp(
            `always-off-${verb}-\\w+\\s+always-off\\s+${type}\\s+Failed\\s+NotApplicableForVirtualMachineRunPolicy`,
          ),
        );
      }
      await vms.kubectl(['delete', 'vm', 'always-off', '--wait=false']);
    });
  });

  describe('changes that need a restart', () => {
    const awaiting = (vm: Vm) => vm.status?.restartAwaitingChanges;

    it('Manual approval: listed, cleared by a revert, applied and cleared by a Restart', async () => {
      await applyVm('changes', '  runPolicy: Manual');
      await bootedRun('changes');
      await vms.patchVm('changes', { maximumCpus: 3 });
      const waiting = await vms.waitForVm(
        'changes',
        (vm) => {
          expect(awaiting(vm)).toEqual([
            { operation: 'replace', path: 'spec.vm.maximumCpus', currentValue: 2, desiredValue: 3 },
          ]);
          expect(vms.condition(vm, 'AwaitingRestartToApplyConfiguration')).toMatchObject({
            status: 'True',
            reason: 'ChangesPendingRestart',
          });
        },
        60_000,
      );
      expect(waiting.status?.phase).toBe('Running'); // nothing restarted by itself
      expect(await vms.kubectl(['get', 'vm', 'changes', '-o', 'wide'])).toMatch(
        // (no core fraction) RAM (no class), need restart, agent (connected or not yet), migratable, run policy, node
        /changes\s+Running\s+Running\s+1\s+256Mi\s+True\s+\S+\s+\S+\s+Manual\s+vmop-node-\d/,
      );
      const list = await run('kubectl', ['vmop', 'list'], { env: env() });
      expect(list.stdout).toMatch(/changes\s+Running\s+\S+\s+1\s+256Mi\s+yes/);

      await vms.patchVm('changes', { maximumCpus: 2 });
      await vms.waitForVm(
        'changes',
        (vm) => {
          expect(awaiting(vm)).toBeUndefined();
          expect(vms.condition(vm, 'AwaitingRestartToApplyConfiguration')?.status).toBe('False');
        },
        60_000,
      );

      await vms.patchVm('changes', { maximumCpus: 3 });
      await vms.waitForVm('changes', (vm) => expect(awaiting(vm)).toHaveLength(1), 60_000);
      expect((await vmopVm('restart', 'changes', '--wait')).code).toBe(0);
      await vms.waitForVm('changes', (vm) => expect(awaiting(vm)).toBeUndefined(), 60_000);
      await vms.waitForConsole('changes', READY);
      await vms.typeOnConsole('changes', 'echo possible-cpus-$(cat /sys/devices/system/cpu/possible)');
      await vms.waitForConsole('changes', 'possible-cpus-0-2');
      await vms.kubectl(['delete', 'vm', 'changes', '--wait=false']);
    });

    it('Automatic approval: vmop restarts the VM itself', async () => {
      await applyVm('auto', '  disruptions: {restartApprovalMode: Automatic}');
      const first = await bootedRun('auto');
      await vms.patchVm('auto', { maximumCpus: 3 });
      const vm = await vms.waitForVm('auto', (vm) => {
        expect(vm.status?.runner?.runId).not.toBe(first.status?.runner?.runId);
        expect(vm.status?.phase).toBe('Running');
        expect(awaiting(vm)).toBeUndefined();
      });
      expect(vm.metadata.generation).toBeGreaterThan(first.metadata.generation);
      const ops = await vms.kubectl(['get', 'vmop']);
      expect(ops).toMatch(
        new RegExp(`auto-auto-restart-${vm.metadata.generation}\\s+auto\\s+Restart\\s+Completed`),
      );
      expect(await vms.eventMessages('auto')).toContain(
        'RestartToApplyChanges: restarting to apply spec.vm.maximumCpus (restartApprovalMode Automatic)',
      );
      await vms.kubectl(['delete', 'vm', 'auto', '--wait=false']);
    });
  });
});
