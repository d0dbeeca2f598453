// End to end, everything real: `vmop dev up` (a single-node Kubernetes with kubelet and
// containerd, Redis, two managers), VMs booting the test guest under TCG in runner pods of the
// runner image, runtime changes reaching the guest and coming back into status, graceful stops
// through kubelet's termination, guest power-offs, and a manager killed with SIGKILL.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DevState } from '../../src/devenv/dev-environment.js';
import { RESTRICTED_LABEL, useDevBed } from '../support/beds.js';
import { KVM_DEVICE } from '../../src/api/node-devices.js';
import { RUNNER_CONTAINER } from '../../src/reconcilers/virtual-machine/naming.js';
import { clusterVms, testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { firstWrite, parseManagerLog, startedAfter } from '../support/manager-logs.js';
import { signalRecorded } from '../support/qemu-process.js';

const run = promisify(execFile);
const NAMESPACE = 'lifecycle';

describe('vmop end to end', () => {
  const bed = useDevBed('dev', { namespaces: [NAMESPACE], madeByTests: ['team-x'] });
  let state: DevState;
  let vms: ClusterVms;
  /** Where the files this test makes go (CD images' contents). */
  let scratch: string;
  const vmop = (...args: string[]) => bed.vmop(...args);
  const applyVm = (name: string, extraSpec = '') =>
    vms.apply(testGuestManifest(name, NAMESPACE, { extraSpec }));
  const booted = (name: string, on = vms) =>
    on.waitForVm(name, (vm) => expect(on.condition(vm, 'Booted')?.status).toBe('True'));
  const podGone = (name: string) =>
    eventually(() => expect(vms.kubectl(['get', 'pod', name])).rejects.toThrow(/NotFound/), 120_000);

  beforeAll(async () => {
    state = bed.state();
    vms = bed.vms(NAMESPACE);
    scratch = await mkdtemp(path.join(os.tmpdir(), 'vmop-e2e-lifecycle-'));
  });
  afterAll(() => rm(scratch, { recursive: true, force: true }));

  it('`vmop dev up` is idempotent and `status -o json` says where things are', async () => {
    const again = JSON.parse(await vmop('dev', 'up', '-o', 'json'));
    expect(again.supervisor).toEqual(state.supervisor);
    const status = JSON.parse(await vmop('dev', 'status', '-o', 'json'));
    expect(status).toMatchObject({ kubeconfig: state.kubeconfig, redisUrl: state.redisUrl });
    // The web GUI of each replica: in the JSON and the text, and answering there.
    expect(status.web.urls).toHaveLength(2);
    const text = await vmop('dev', 'status');
    for (const url of status.web.urls as string[]) {
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(text).toContain(url);
      const page = await fetch(`${url}/`);
      expect([page.status, (await page.text()).includes('id="app"')]).toEqual([200, true]);
    }
    const nodes = JSON.parse(await vms.kubectl(['get', 'nodes', '-o', 'json']));
    expect(nodes.items.map((n: { metadata: { name: string } }) => n.metadata.name)).toEqual([
      state.cluster.node,
    ]);
  });

  it("boots the README's example VM (with a provisioned disk) in a runner pod", async () => {
    // Applied unchanged: in the namespace it names, default.
    const example = bed.vms('default');
    await example.kubectl(['apply', '-f', 'examples/test-guest.yaml']);
    const vm = await booted('test-guest', example);
    expect(vm.status).toMatchObject({ phase: 'Running', cpus: 1, ram: '256Mi', node: state.cluster.node });
    expect(
      await example.kubectl(['get', 'pvc', 'test-guest-data-disk', '-o', 'jsonpath={.status.phase}']),
    ).toBe('Bound');
    await example.waitForConsole('test-guest', 'VMOP-GUEST-READY');
    // Its disks stay (as a deleted VM's do): the bed is gone with them at its end.
    await example.kubectl(['delete', 'vm', 'test-guest', '--wait=false']);
  });

  it('boots a VM: status Running and Booted, with the CPUs and RAM of the spec, and what the guest agent says', async () => {
    // User networking, so the guest has an address for its agent to report.
    await vms.apply(testGuestManifest('e2e', NAMESPACE).replace('networks: []', 'networks: [{user: {}}]'));
    const vm = await vms.waitForVm('e2e', (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
      expect(vms.condition(vm, 'AgentConnected')?.status).toBe('True');
      expect((vm.status as { ipAddresses?: string[] }).ipAddresses?.[0]).toBe('10.0.2.15');
    });
    expect(vm.status).toMatchObject({ cpus: 1, ram: '256Mi', node: state.cluster.node });
    expect((vm.status as { osinfo?: object }).osinfo).toMatchObject({
      id: 'vmop-test-guest',
      'pretty-name': 'vmop test guest',
    });
    expect(await vms.kubectl(['get', 'vm', 'e2e', '-o', 'wide'])).toMatch(/\s10\.0\.2\.15\s/);
    await vms.waitForConsole('e2e', 'VMOP-GUEST-READY');
  });

  it("its runner is an unprivileged pod on the pod network: a user of its own, no /dev/kvm where the managers emulate, none of the node's network", async () => {
    const pod = JSON.parse(await vms.kubectl(['get', 'pod', 'e2e', '-o', 'json']));
    expect(pod.spec.hostNetwork).toBeUndefined();
    expect(pod.spec.containers[0].securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
    });
    expect(pod.status.podIP).not.toBe(pod.status.hostIP);
    const inRunner = async (script: string) =>
      (await vms.kubectl(['exec', 'e2e', '-c', RUNNER_CONTAINER, '--', 'sh', '-c', script])).trim();
    expect(await inRunner('id -u')).toBe('65532');
    expect((await inRunner('ls /sys/class/net')).split(/\s+/).sort()).toEqual(['eth0', 'lo']);
    // The bed's managers run with --no-kvm (the chart's suite sees /dev/kvm reach a runner).
    expect(pod.spec.containers[0].resources.limits?.[KVM_DEVICE]).toBeUndefined();
    expect(await inRunner('test -e /dev/kvm && echo present || echo absent')).toBe('absent');
  });

  it('a VM in a namespace made after `vmop dev up` finds the test guest in its image repository too', async () => {
    await vms.kubectl(['create', 'namespace', 'team-x']);
    await vms.kubectl(['label', 'namespace', 'team-x', RESTRICTED_LABEL]);
    const team = clusterVms(state.kubeconfig, 'team-x');
    await team.apply(testGuestManifest('elsewhere', 'team-x'));
    await team.waitForVm('elsewhere', (vm) => expect(team.condition(vm, 'Booted')?.status).toBe('True'));
    await team.waitForConsole('elsewhere', 'VMOP-GUEST-READY');
    const volume = await team.kubectl([
      'get',
      'pvc',
      'vmop-image-repository',
      '-o',
      'jsonpath={.spec.volumeName}',
    ]);
    await vms.kubectl(['delete', 'namespace', 'team-x']);
    // Its repository volume goes with it.
    await eventually(() => expect(vms.kubectl(['get', 'pv', volume])).rejects.toThrow(/NotFound/), 60_000);
  });

  it('`vmop vm console` in a real terminal (tmux): replays the output, the shell answers, a second session displaces the first, ^] leaves', async () => {
    const server = `vmop-e2e-${process.pid}`;
    const tmux = (...args: string[]) => run('tmux', ['-L', server, ...args]);
    const pane = async (session: string) =>
      (await tmux('capture-pane', '-p', '-J', '-S', '-200', '-t', session)).stdout;
    const paneShows = (session: string, text: string) =>
      eventually(async () => expect(await pane(session)).toContain(text), 60_000, 250);
    const open = (session: string) =>
      tmux(
        ...['new-session', '-d', '-s', session, '-x', '160', '-y', '40'],
        `${path.resolve('bin/vmop')} vm console e2e --kubeconfig ${state.kubeconfig} -n ${NAMESPACE}; echo console-exited-$?; sleep 600`,
      );
    try {
      await open('first');
      await paneShows('first', 'VMOP-GUEST-READY'); // the recent output, replayed
      await tmux('send-keys', '-t', 'first', 'echo answer-$((6*7))', 'Enter');
      await paneShows('first', 'answer-42');

      await open('second');
      await paneShows('first', '[vmop: this console session was taken over by another one]');
      await paneShows('first', 'console-exited-0');
      await tmux('send-keys', '-t', 'second', 'echo second-$((20+22))', 'Enter');
      await paneShows('second', 'second-42');

      await tmux('send-keys', '-t', 'second', 'C-]');
      await paneShows('second', 'vmop: left the console');
      await paneShows('second', 'console-exited-0');
    } finally {
      await tmux('kill-server').catch(() => undefined);
    }
  });

  it('currentRam: the guest balloon shrinks and status.ram follows', async () => {
    await vms.patchVm('e2e', { currentRam: '192Mi' });
    await vms.waitForVm('e2e', (vm) => expect(vm.status?.ram).toBe('192Mi'), 30_000);
  });

  it('a manager killed with SIGKILL: the other replica carries on (currentCpus 1→2 reaches the guest), `vmop dev` restarts it', async () => {
    // The bed is shared: what earlier files did to it counts from where it stands.
    const before = JSON.parse(await vmop('dev', 'status', '-o', 'json'));
    const killed = bed.state().managers[0]!;
    signalRecorded(killed);
    const killedAt = Date.now();
    await vms.patchVm('e2e', { currentCpus: 2 });
    // Seconds: the survivor takes the key at once (within KEY_LOCK's 4.5 s had the victim held it).
    await vms.waitForConsole('e2e', 'vmop-guest: cpu1 online', 20_000);
    await vms.waitForVm('e2e', (vm) => expect(vm.status?.cpus).toBe(2), 10_000);
    const status = await eventually(async () => {
      const current = JSON.parse(await vmop('dev', 'status', '-o', 'json'));
      expect(current.managers[0]).toMatchObject({ alive: true, restarts: before.managers[0].restarts + 1 });
      return current;
    }, 20_000);
    // The survivor wrote the new config before the replacement was even up.
    const logOf = async (replica: number) =>
      parseManagerLog(await readFile(state.managers[replica]!.log, 'utf8'));
    const replacementStarted = await eventually(async () => {
      const at = startedAfter(await logOf(0), killedAt);
      expect(at).toBeDefined();
      return at!;
    }, 20_000);
    const replacement = await logOf(0);
    const survivorWrote = firstWrite(await logOf(1), `vm:${NAMESPACE}/e2e`, 'ConfigMap', killedAt);
    expect(survivorWrote).toBeDefined();
    expect(survivorWrote!).toBeLessThan(replacementStarted);
    expect(firstWrite(replacement, `vm:${NAMESPACE}/e2e`, 'ConfigMap', killedAt)).toBeUndefined();
    expect(status.managers[0].startTime).not.toBe(killed.startTime);
    expect(status.managers[1]).toMatchObject({
      pid: before.managers[1].pid,
      startTime: before.managers[1].startTime,
      alive: true,
      restarts: before.managers[1].restarts,
    });
    expect(status.redis).toMatchObject({ alive: true, restarts: before.redis.restarts });
    expect(await vmop('dev', 'status')).toMatch(
      new RegExp(`manager-1: +pid \\d+ alive, restarted ${before.managers[0].restarts + 1}x`),
    );
    state = status;
  });

  it("state Stopped: kubelet's SIGTERM makes the runner power the guest down (guest agent), status Stopped", async () => {
    await vms.patchVm('e2e', { state: 'Stopped' });
    const vm = await vms.waitForVm('e2e', (vm) => expect(vm.status?.phase).toBe('Stopped'));
    expect(vm.status?.lastShutdown).toMatchObject({ guestInitiated: true, reason: 'guest-shutdown' });
    await podGone('e2e');
    expect(await vms.eventReasons('e2e')).toEqual(expect.arrayContaining(['Started', 'StoppedByRequest']));
  });

  it('a changed display password reaches the running guest (kubelet refreshes the Secret volume)', async () => {
    const secret = (password: string) => `apiVersion: v1
kind: Secret
metadata:
  name: spice-display-secret
  namespace: ${NAMESPACE}
  labels:
    app.kubernetes.io/name: vm-runner
    app.kubernetes.io/component: display-secret
    app.kubernetes.io/instance: spice
stringData:
  display-password: ${password}
`;
    await vms.apply(secret('first-password'));
    await vms.apply(testGuestManifest('spice', NAMESPACE, { spicePort: 5941 }));
    await booted('spice');
    const serial = (vm: Vm) =>
      (vm.status as { displayPasswordSerial?: number } | undefined)?.displayPasswordSerial;
    const first = serial(await vms.waitForVm('spice', (vm) => expect(serial(vm)).toBeGreaterThanOrEqual(1)));
    await vms.apply(secret('second-password'));
    // kubelet's own sync of the Secret volume would take up to 5 min here (node-config.ts): vmop's nudge brings it.
    await vms.waitForVm('spice', (vm) => expect(serial(vm)).toBe(first! + 1), 30_000);
    await vms.kubectl(['delete', 'vm', 'spice', '--wait=false']);
  });

  // The runtime changes below reach the runner through its config volume, which kubelet here would
  // refresh only every 5 min (node-config.ts); the deadlines are far below that: vmop's nudge brings them.
  it('a CD change reaches the running guest', async () => {
    const repository = path.join(state.cluster.dir, 'image-repository');
    for (const disc of ['cd-a', 'cd-b']) {
      const content = path.join(scratch, disc);
      await mkdir(content);
      await writeFile(path.join(content, 'label'), `label-of-${disc}\n`);
      await run('genisoimage', [
        '-quiet',
        '-r',
        '-V',
        disc,
        '-o',
        path.join(repository, `${disc}.iso`),
        content,
      ]);
    }
    const withCd = (image: string) => `    disks:\n    - cdrom: {image: ${image}}\n`;
    await vms.apply(
      testGuestManifest('cd', NAMESPACE).replace(
        '    networks: []\n',
        `    networks: []\n${withCd('cd-a.iso')}`,
      ),
    );
    await booted('cd');
    await vms.waitForConsole('cd', 'VMOP-GUEST-READY');
    const readCd = 'mount -o ro /dev/sr0 /mnt && cat /mnt/label; umount /mnt';
    await vms.typeOnConsole('cd', readCd);
    await vms.waitForConsole('cd', 'label-of-cd-a', 30_000);
    await vms.patchVm('cd', { disks: [{ cdrom: { image: 'cd-b.iso' } }] });
    // One follower of the console for the whole wait, the read retyped meanwhile (the guest may
    // see the new medium only after its first read of it failed): a follower per try was slower
    // to start than its 2-s try under a whole run, and the try that read the label saw nothing.
    const labelSeen = vms.waitForConsole('cd', 'label-of-cd-b', 60_000);
    const retype = setInterval(() => void vms.typeOnConsole('cd', readCd).catch(() => undefined), 3_000);
    try {
      await vms.typeOnConsole('cd', readCd);
      await labelSeen;
    } finally {
      clearInterval(retype);
    }
    await vms.kubectl(['delete', 'vm', 'cd', '--wait=false']);
  });

  it('a lowered powerdownTimeout applies to the running VM: a guest that ignores the power button is stopped after it', async () => {
    await vms.apply(testGuestManifest('pdt', NAMESPACE, { powerdownTimeout: 600 }));
    await booted('pdt');
    await vms.waitForConsole('pdt', 'VMOP-GUEST-READY');
    await vms.typeOnConsole('pdt', 'touch /run/vmop-ignore-powerbutton; echo deaf-$((6*7))');
    await vms.waitForConsole('pdt', 'deaf-42');
    await vms.patchVm('pdt', { powerdownTimeout: 5 });
    await eventually(async () => {
      const logs = await vms.kubectl(['logs', 'pdt', '-c', 'runner']);
      expect(logs).toMatch(/"changes":\{[^}]*"powerdownTimeout":5[,}].*"msg":"config changed"/);
    }, 30_000);
    const stopAt = Date.now();
    await vms.patchVm('pdt', { state: 'Stopped' });
    const vm = await vms.waitForVm('pdt', (vm) => expect(vm.status?.phase).toBe('Stopped'), 120_000);
    expect(Date.now() - stopAt).toBeLessThan(120_000); // not the 600 s it started with
    expect(vm.status?.lastShutdown).toMatchObject({ guestInitiated: false });
    expect(await vms.eventMessages('pdt')).toContain('StoppedByRequest: the VM was stopped (host-qmp-quit)');
    await vms.kubectl(['delete', 'vm', 'pdt', '--wait=false']);
    // Its waits add up past the suite's 300 s on a slow machine (CI's took 2.5× this one's time).
  }, 600_000);

  it('guestShutdownStops false: a guest that powers itself off boots again', async () => {
    await applyVm('reboots');
    const first = await booted('reboots');
    await vms.waitForConsole('reboots', 'VMOP-GUEST-READY');
    await vms.typeOnConsole('reboots', 'poweroff -f');
    const again = await vms.waitForVm('reboots', (vm) => {
      expect(vm.status?.runner?.runId).not.toBe(first.status?.runner?.runId);
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
    });
    expect(again.spec.vm.state).toBe('Running');
    expect(again.status?.lastShutdown).toMatchObject({ guestInitiated: true });
    await vms.kubectl(['delete', 'vm', 'reboots', '--wait=false']);
  });

  it('guestShutdownStops true: a guest that powers itself off stays off, and spec says Stopped', async () => {
    await applyVm('stays-off', '  guestShutdownStops: true');
    await booted('stays-off');
    await vms.waitForConsole('stays-off', 'VMOP-GUEST-READY');
    await vms.typeOnConsole('stays-off', 'poweroff -f');
    const vm = await vms.waitForVm('stays-off', (vm) => {
      expect(vm.spec.vm.state).toBe('Stopped');
      expect(vm.status?.phase).toBe('Stopped');
    });
    expect(vm.status?.lastShutdown).toMatchObject({ guestInitiated: true, reason: 'guest-shutdown' });
    await podGone('stays-off');
    expect(await vms.eventReasons('stays-off')).toContain('StoppedByGuest');
  });
});
