// Issue 11 §4 and §5 end to end on `vmop dev` (kubelet, containerd, TCG guests): the start
// back-off growing and resetting; why a runner pod cannot start, in the VM's status; cloud-init
// data from a Secret seen inside the guest, and nowhere else.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import type { DevState } from '../../src/devenv/dev-environment.js';
import { useDevBed } from '../support/beds.js';
import { testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';

const run = promisify(execFile);
const NAMESPACE = 'start';
const READY = 'VMOP-GUEST-READY';

interface StartFailure {
  consecutiveFailCount: number;
  lastFailedRunId: string;
  lastFailureTime: string;
  retryAfter?: string;
}
const startFailure = (vm: Vm) => (vm.status as { startFailure?: StartFailure } | undefined)?.startFailure;
const backoffSeconds = (failure: StartFailure) =>
  (Date.parse(failure.retryAfter!) - Date.parse(failure.lastFailureTime)) / 1000;

/** Every value in a Redis database (strings, hashes, lists, sets, streams), as one text. */
async function redisContents(url: string): Promise<string> {
  const redis = new Redis(url);
  try {
    const keys = await redis.keys('*');
    const values = await Promise.all(
      keys.map(async (key) => {
        switch (await redis.type(key)) {
          case 'string':
            return redis.get(key);
          case 'hash':
            return redis.hgetall(key);
          case 'list':
            return redis.lrange(key, 0, -1);
          case 'set':
            return redis.smembers(key);
          case 'zset':
            return redis.zrange(key, '0', '-1');
          case 'stream':
            return redis.xrange(key, '-', '+');
          default:
            return '';
        }
      }),
    );
    return JSON.stringify([keys, values]);
  } finally {
    redis.disconnect();
  }
}

describe('start failures and provisioning from Secrets', () => {
  const bed = useDevBed('dev', { namespaces: [NAMESPACE] });
  let state: DevState;
  let vms: ClusterVms;
  // `vmop vm` as a user runs it, in the file's namespace.
  const env = () => bed.env(NAMESPACE);
  const applyVm = (name: string, extraSpec: string, vmLines = '') =>
    vms.apply(
      testGuestManifest(name, NAMESPACE, { extraSpec }).replace(
        '    networks: []\n',
        `    networks: []\n${vmLines}`,
      ),
    );
  const running = (vm: Vm) => vms.condition(vm, 'Running');
  const podUid = (name: string) => vms.kubectl(['get', 'pod', name, '-o', 'jsonpath={.metadata.uid}']);

  beforeAll(() => {
    state = bed.state();
    vms = bed.vms(NAMESPACE);
  });

  it('a VM that cannot start backs off 10 s × failures² (CrashLoopBackOff); Start resets it, a stop ends it, a fix boots it', async () => {
    const missingCd = '    disks:\n    - cdrom: {image: no-such.iso}\n';
    await applyVm('backoff', '', missingCd);
    const first = await vms.waitForVm('backoff', (vm) => {
      expect(vm.status?.phase).toBe('Failed');
      expect(running(vm)).toMatchObject({ reason: 'CrashLoopBackOff' });
      expect(startFailure(vm)?.consecutiveFailCount).toBe(1);
    });
    expect(running(first)?.message).toContain('no-such.iso does not exist');
    expect(running(first)?.message).toContain(`vmop starts it again at ${startFailure(first)!.retryAfter}`);
    expect(backoffSeconds(startFailure(first)!)).toBeGreaterThanOrEqual(10);
    expect(backoffSeconds(startFailure(first)!)).toBeLessThanOrEqual(15);
    expect(vms.condition(first, 'SpecValid')?.message).toContain('spec.vm.disks[0].cdrom.image');
    const firstPod = await podUid('backoff');

    // The retry replaces the pod; the second failure waits four times as long.
    const second = await vms.waitForVm('backoff', (vm) => {
      expect(startFailure(vm)?.consecutiveFailCount).toBe(2);
      expect(running(vm)?.reason).toBe('CrashLoopBackOff');
    });
    expect(await podUid('backoff')).not.toBe(firstPod);
    expect(backoffSeconds(startFailure(second)!)).toBeGreaterThanOrEqual(40);
    expect(backoffSeconds(startFailure(second)!)).toBeLessThanOrEqual(60);
    expect(await vms.eventMessages('backoff')).toContain(
      'RetryingStart: starting the VM again after 1 failed start(s) in a row',
    );
    // kubelet's own back-off is not involved: the runner waited, it did not crash-loop.
    expect(second.status?.runnerRestarts).toBe(0);

    // A Start operation starts it at once, and counts from the beginning.
    const secondPod = await podUid('backoff');
    const start = await run('bin/vmop', ['vm', 'start', 'backoff', '--wait', '--timeout', '120s'], {
      env: env(),
    }).catch((err: { code: number; stdout: string; stderr: string }) => err);
    expect('code' in start ? start.code : 0).not.toBe(0); // it fails again, and says so
    const reset = await vms.waitForVm('backoff', (vm) => {
      expect(startFailure(vm)?.consecutiveFailCount).toBe(1);
      expect(vm.status?.runner?.runId).not.toBe(second.status?.runner?.runId);
    });
    expect(await podUid('backoff')).not.toBe(secondPod);
    expect(backoffSeconds(startFailure(reset)!)).toBeLessThanOrEqual(15);

    // Stopping ends the back-off.
    await vms.patchVm('backoff', { state: 'Stopped' });
    await vms.waitForVm('backoff', (vm) => {
      expect(vm.status?.phase).toBe('Stopped');
      expect(startFailure(vm)).toBeUndefined();
    });

    // Fixed and started: it boots, and nothing of the back-off is left.
    await vms.kubectl([
      'patch',
      'vm',
      'backoff',
      '--type',
      'json',
      '-p',
      '[{"op":"remove","path":"/spec/vm/disks"}]',
    ]);
    await vms.patchVm('backoff', { state: 'Running' });
    const booted = await vms.waitForVm('backoff', (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
    });
    expect(startFailure(booted)).toBeUndefined();
    await vms.kubectl(['delete', 'vm', 'backoff', '--wait=false']);
  });

  it('a changed spec is tried at once, whatever the back-off, and a run of the guest clears it', async () => {
    await applyVm('fixed-live', '', '    disks:\n    - cdrom: {image: no-such.iso}\n');
    await vms.waitForVm('fixed-live', (vm) => expect(startFailure(vm)?.consecutiveFailCount).toBe(1));
    await vms.kubectl([
      'patch',
      'vm',
      'fixed-live',
      '--type',
      'json',
      '-p',
      '[{"op":"remove","path":"/spec/vm/disks"}]',
    ]);
    const booted = await vms.waitForVm(
      'fixed-live',
      (vm) => {
        expect(vms.condition(vm, 'Booted')?.status).toBe('True');
        expect(startFailure(vm)).toBeUndefined();
      },
      120_000,
    );
    expect(booted.status?.phase).toBe('Running');
    await vms.kubectl(['delete', 'vm', 'fixed-live', '--wait=false']);
  });

  it.each(['AlwaysOn', 'AlwaysOnUnlessStoppedManually'])(
    'runPolicy %s: a start failure backs off too',
    async (policy) => {
      const name = policy.toLowerCase();
      await applyVm(name, `  runPolicy: ${policy}`, '    disks:\n    - cdrom: {image: no-such.iso}\n');
      await vms.waitForVm(name, (vm) => {
        expect(running(vm)?.reason).toBe('CrashLoopBackOff');
        expect(startFailure(vm)?.consecutiveFailCount).toBe(1);
        expect(vm.spec.vm.state).toBe('Running');
      });
      await vms.kubectl(['delete', 'vm', name, '--wait=false']);
    },
  );

  it('runPolicy Manual: a start failure stops the VM (no back-off), with the failure in a Warning Event', async () => {
    await applyVm('manual-start', '  runPolicy: Manual', '    disks:\n    - cdrom: {image: no-such.iso}\n');
    const stopped = await vms.waitForVm('manual-start', (vm) => {
      expect(vm.spec.vm.state).toBe('Stopped');
      expect(vm.status?.phase).toBe('Stopped');
    });
    expect(startFailure(stopped)).toBeUndefined();
    expect((await vms.eventMessages('manual-start')).join('\n')).toMatch(
      /StoppedAfterFailure: CD image .*no-such\.iso does not exist; runPolicy Manual keeps the VM off/,
    );
    await vms.kubectl(['delete', 'vm', 'manual-start', '--wait=false']);
  });

  it.each([
    [
      'no node matches',
      '  nodeSelector: {vmop-e2e/no-such-label: "x"}',
      '',
      'Pending',
      'PodUnscheduled',
      /^the runner pod cannot be scheduled: 0\/1 nodes are available: .*didn't match Pod's node affinity\/selector/,
    ],
    [
      'its disk is not bound',
      '',
      '    disks:\n    - volumeClaimTemplate:\n        metadata: {name: unbound}\n        spec: {storageClassName: "", selector: {matchLabels: {vmop-e2e: none}}, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Mi}}}\n',
      'Pending',
      'WaitingForVolumeBinding',
      /^the runner pod cannot be scheduled: 0\/1 nodes are available: pod has unbound immediate PersistentVolumeClaims/,
    ],
    [
      // The default runner image (the one a VM may always name), pulled from a registry that has it not.
      'its runner image cannot be pulled',
      '  image: {source: "DEFAULT_RUNNER_IMAGE", pullPolicy: Always}',
      '',
      'Starting',
      /^(ErrImagePull|ImagePullBackOff)$/,
      /^the runner container cannot start: .*localhost\/vmop-runner:/,
    ],
  ])(
    'the runner pod cannot start because %s: phase and reason say so, with the underlying message',
    async (what, extraSpec, vmLines, phase, reason, message) => {
      const name = `blocked-${what.split(' ').at(-1)}`.replace(/[^a-z-]/g, '');
      await applyVm(name, extraSpec.replace('DEFAULT_RUNNER_IMAGE', state.cluster.runnerImage), vmLines);
      await vms.waitForVm(
        name,
        (vm) => {
          expect(vm.status?.phase).toBe(phase);
          expect(running(vm)?.reason).toMatch(reason);
          expect(running(vm)?.message).toMatch(message);
        },
        90_000,
      );
      await vms.kubectl(['delete', 'vm', name, '--wait=false']);
    },
  );

  it('a VM naming a runner image the cluster does not allow does not start, and says why', async () => {
    await applyVm('own-runner', '  image: {source: "registry.example/mine:1"}');
    const vm = await vms.waitForVm('own-runner', (vm) => {
      expect(vms.condition(vm, 'SpecValid')).toMatchObject({
        status: 'False',
        message: expect.stringContaining(
          'spec.image: registry.example/mine:1 is not a runner image this cluster allows',
        ),
      });
    });
    expect(vm.status?.phase).toBe('Pending');
    expect(vm.status?.runnerPod).toBeUndefined();
    expect(
      await vms.kubectl(['get', 'pods', '-l', 'app.kubernetes.io/instance=own-runner', '-o', 'name']),
    ).toBe('');
    await vms.kubectl(['delete', 'vm', 'own-runner', '--wait=false']);
  });

  it("a VM with a tap network on the node's bridge does not start in a namespace the admin did not allow, and says why", async () => {
    await vms.apply(
      testGuestManifest('bridged', NAMESPACE).replace(
        '    networks: []\n',
        '    networks: [{tap: {bridge: br0}}]\n',
      ),
    );
    const vm = await vms.waitForVm('bridged', (vm) => {
      expect(vms.condition(vm, 'SpecValid')).toMatchObject({
        status: 'False',
        message: expect.stringContaining(
          "spec.vm.networks[0].tap: a tap network on the node's bridge br0 needs a privileged runner on the node's network",
        ),
      });
    });
    expect(vm.status?.phase).toBe('Pending');
    expect(await vms.kubectl(['get', 'pods', '-l', 'app.kubernetes.io/instance=bridged', '-o', 'name'])).toBe(
      '',
    );
    await vms.kubectl(['delete', 'vm', 'bridged', '--wait=false']);
  });

  it('a VM whose SPICE display would have no password does not start unless the admin allows it, and says why', async () => {
    await vms.apply(
      testGuestManifest('open-display', NAMESPACE).replace(
        'display: {outputs: 1}',
        'display: {spice: {port: 5939, generateSecret: false}}',
      ),
    );
    const vm = await vms.waitForVm('open-display', (vm) => {
      expect(vms.condition(vm, 'SpecValid')).toMatchObject({
        status: 'False',
        message: expect.stringContaining(
          'spec.vm.display.spice.generateSecret: false and no display Secret: the display would have no password',
        ),
      });
    });
    expect(vm.status?.runnerPod).toBeUndefined();
    await vms.kubectl(['delete', 'vm', 'open-display', '--wait=false']);
  });

  it('cloud-init user-data from a Secret (Deckhouse type) reaches the guest and nothing else: ConfigMap, status, Events, logs, Redis', async () => {
    const password = `pw-${Date.now().toString(36)}-never-shown`;
    await applyVm(
      'provisioned',
      '  cloudInit:\n    secretRef: {name: provisioned-cloud-init}\n    metaData: {local-hostname: provisioned}',
    );
    // Without the Secret it does not start, and says why.
    const waiting = await vms.waitForVm(
      'provisioned',
      (vm) => {
        expect(vms.condition(vm, 'SpecValid')).toMatchObject({
          status: 'False',
          message: 'spec.cloudInit.secretRef: Secret "provisioned-cloud-init" not found',
        });
      },
      60_000,
    );
    expect(waiting.status?.phase).toBe('Pending');

    const userData = `#cloud-config\nchpasswd:\n  users:\n  - {name: root, password: ${password}}\n`;
    await vms.apply(`apiVersion: v1
kind: Secret
metadata: {name: provisioned-cloud-init, namespace: ${NAMESPACE}}
type: provisioning.virtualization.deckhouse.io/cloud-init
stringData:
  userData: ${JSON.stringify(userData)}
`);
    await vms.waitForVm(
      'provisioned',
      (vm) => expect(vms.condition(vm, 'Booted')?.status).toBe('True'),
      240_000,
    );
    await vms.waitForConsole('provisioned', READY);
    const guestConsole = await vms.consoleLog('provisioned');
    expect(guestConsole).toContain(`vmop-guest: user-data:   - {name: root, password: ${password}}`);
    expect(guestConsole).toContain('vmop-guest: meta-data: local-hostname: provisioned');

    const elsewhere = [
      await vms.kubectl(['get', 'configmap', 'provisioned', '-o', 'yaml']),
      await vms.kubectl(['get', 'vm', 'provisioned', '-o', 'yaml']),
      await vms.kubectl(['get', 'events', '-o', 'yaml']),
      await vms.kubectl(['logs', 'provisioned', '-c', 'runner']),
      ...(await Promise.all(state.managers.map((manager) => readFile(manager.log, 'utf8')))),
      await redisContents(state.redisUrl),
    ];
    for (const text of elsewhere) expect(text).not.toContain(password);
    await vms.kubectl(['delete', 'vm', 'provisioned', '--wait=false']);
    // Its waits add up past the suite's 300 s on a slow machine (CI's took 2.5× this one's time).
  }, 600_000);
});
