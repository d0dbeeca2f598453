import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, readdir, readlink, rm, stat, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { CoordinationV1Api, CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { stringify } from 'yaml';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { TEST_GUEST_READY_MARKER } from '../../../src/devenv/test-guest.js';
import { eventually } from '../../support/eventually.js';
import {
  createTestNamespace,
  isNotFound,
  kubectl,
  sharedKubeConfig,
  type TestNamespace,
} from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';
import { startNodeProcess, type NodeProcess } from '../../support/node-process.js';
import { isAlive, makeImageRepository, waitForConsoleLog } from '../runner/harness.js';

const MiB = 1024 * 1024;
const VM = 'guest';
const POD = `${VM}-0`;
const BOOT_TIMEOUT_MS = 120_000;
const kubeConfig = sharedKubeConfig();
const core = kubeConfig.makeApiClient(CoreV1Api);
const coordination = kubeConfig.makeApiClient(CoordinationV1Api);

/** A test-guest VM with a disk the node provisions (64Mi) and one whose claim selects a pre-created PV. */
function virtualMachine(namespace: string, state: 'Running' | 'Stopped') {
  return {
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: VM, namespace },
    spec: {
      runnerTemplate: { source: 'test-guest.liquid' },
      vm: {
        state,
        maximumCpus: 1,
        maximumRam: '256Mi',
        currentRam: '256Mi',
        powerdownTimeout: 20,
        firmware: 'bios',
        networks: [],
        display: { outputs: 1 },
        disks: [
          {
            volumeClaimTemplate: {
              metadata: { name: 'system' },
              spec: { resources: { requests: { storage: '64Mi' } } },
            },
          },
          {
            volumeClaimTemplate: {
              metadata: { name: 'data' },
              spec: {
                storageClassName: '',
                selector: { matchLabels: { 'vmop-test/namespace': namespace, 'vmop-test/disk': 'data' } },
                resources: { requests: { storage: '32Mi' } },
              },
            },
          },
        ],
      },
    },
  };
}

const readPod = () => core.readNamespacedPod({ name: POD, namespace: ns.name });
const runnerPid = (pod: V1Pod) =>
  Number(/^vmop:\/\/(\d+)$/.exec(pod.status!.containerStatuses![0]!.containerID!)![1]);
const podDir = (pod: V1Pod) => path.join(stateDir, 'pods', `${ns.name}_${POD}_${pod.metadata!.uid}`);
const patchVm = (vm: Record<string, unknown>) =>
  kubectl(['patch', 'vm', '-n', ns.name, VM, '--type', 'merge', '-p', JSON.stringify({ spec: { vm } })]);

/** The pod once its runner runs (a different runner than `notPid`, when given). */
const runningPod = (notPid?: number) =>
  eventually(async () => {
    const pod = await readPod();
    expect(pod.status?.phase).toBe('Running');
    expect(pod.status?.containerStatuses?.[0]?.state?.running).toBeDefined();
    if (notPid !== undefined) expect(runnerPid(pod)).not.toBe(notPid);
    return pod;
  }, BOOT_TIMEOUT_MS);

let ns: TestNamespace;
let stateDir: string;

describe('vmop node: runner pods as local processes (real apiserver, manager, runner and test guest)', () => {
  let tmp: string;
  let redis: RedisServer;
  let manager: ManagerProcess;
  let node: NodeProcess;
  const nodeName = `vmop-test-${randomBytes(4).toString('hex')}`;
  const precreatedVolume = `${nodeName}-data`;
  let dataDisk: string;

  beforeAll(async () => {
    await installCrds(kubeConfig);
    ns = await createTestNamespace(kubeConfig, 'node');
    tmp = await mkdtemp(path.join(os.tmpdir(), 'vmop-node-test-'));
    stateDir = path.join(tmp, 'state');
    const images = await makeImageRepository(path.join(tmp, 'images'));
    // As VM-Operator's example: a PV made beforehand, labelled for the claim that selects it.
    dataDisk = path.join(tmp, 'data-disk.img');
    await writeFile(dataDisk, 'VMOP-PRECREATED-PV');
    await truncate(dataDisk, 32 * MiB);
    await core.createPersistentVolume({
      body: {
        metadata: {
          name: precreatedVolume,
          labels: { 'vmop-test/namespace': ns.name, 'vmop-test/disk': 'data' },
        },
        spec: {
          capacity: { storage: '32Mi' },
          accessModes: ['ReadWriteOnce'],
          volumeMode: 'Block',
          persistentVolumeReclaimPolicy: 'Retain',
          hostPath: { path: dataDisk },
        },
      },
    });
    redis = await startRedis();
    const kube = ['--kubeconfig', inject('kubeconfigPath')];
    manager = startManagerProcess([...kube, '--redis', redis.url, '-n', ns.name]);
    node = startNodeProcess([
      ...[...kube, '--name', nodeName, '--state-dir', stateDir],
      ...['--image-repository', images, '--runner-env', `VMOP_REDIS_URL=${redis.url}`, '-n', ns.name],
      ...['--restart-backoff', '1', '--lease-duration', '8'],
    ]);
    await manager.waitForLog((l) => l.msg === 'manager started');
    await node.waitForLog((l) => l.msg === 'node agent started');
  });

  afterAll(async () => {
    await node?.stop('SIGKILL');
    await manager?.stop();
    await redis?.stop();
    // Nothing completes a deletion on a stopped node: finish it here, then drop what is cluster-wide.
    await core
      .deleteCollectionNamespacedPod({ namespace: ns.name, gracePeriodSeconds: 0 })
      .catch(() => undefined);
    await ns?.cleanup();
    const provisioned = await core.listPersistentVolume({
      labelSelector: `vmop.jdrupes.org/provisioned-by=${nodeName}`,
    });
    for (const name of [precreatedVolume, ...provisioned.items.map((pv) => pv.metadata!.name!)]) {
      await core.deletePersistentVolume({ name }).catch(() => undefined);
    }
    await core.deleteNode({ name: nodeName }).catch(() => undefined);
    await rm(tmp, { recursive: true, force: true });
  });

  it('registers a Ready node and keeps renewing its Lease', async () => {
    const registered = await core.readNode({ name: nodeName });
    expect(registered.metadata?.labels).toMatchObject({
      'kubernetes.io/hostname': nodeName,
      'vmop.jdrupes.org/local-node': 'true',
    });
    expect(registered.status?.conditions?.find((c) => c.type === 'Ready')?.status).toBe('True');
    const renewed = async () =>
      new Date(
        (await coordination.readNamespacedLease({ name: nodeName, namespace: 'kube-node-lease' })).spec!
          .renewTime!,
      );
    const first = await renewed();
    await eventually(async () => expect((await renewed()).getTime()).toBeGreaterThan(first.getTime()));
  });

  it('binds the runner pod, provisions its claim as a sparse file and runs the runner in its own mount namespace', async () => {
    await kubectl(['apply', '-f', '-'], stringify(virtualMachine(ns.name, 'Running')));
    const pod = await runningPod();
    expect(pod.spec?.nodeName).toBe(nodeName);
    expect(pod.status?.conditions?.find((c) => c.type === 'Ready')?.status).toBe('True');
    expect(pod.status?.message).toContain(path.join(podDir(pod), 'runner.log'));

    const claim = await core.readNamespacedPersistentVolumeClaim({
      name: `system-disk-${POD}`,
      namespace: ns.name,
    });
    expect(claim.status?.phase).toBe('Bound');
    expect(claim.spec?.volumeName).toBe(`vmop-local-${claim.metadata!.uid}`);
    const provisioned = await core.readPersistentVolume({ name: claim.spec!.volumeName! });
    expect(provisioned.spec).toMatchObject({ volumeMode: 'Block', persistentVolumeReclaimPolicy: 'Retain' });
    const image = await stat(provisioned.spec!.local!.path);
    expect(image.size).toBe(64 * MiB);
    expect(image.blocks * 512).toBeLessThan(image.size); // sparse
    const selecting = await core.readNamespacedPersistentVolumeClaim({
      name: `data-disk-${POD}`,
      namespace: ns.name,
    });
    expect(selecting.spec?.volumeName).toBe(precreatedVolume);

    await waitForConsoleLog(
      path.join(podDir(pod), 'run/vmrunner', VM, 'console.log'),
      TEST_GUEST_READY_MARKER,
    );
    const pid = runnerPid(pod);
    expect(await readlink(`/proc/${pid}/ns/mnt`)).not.toBe(await readlink('/proc/self/ns/mnt'));
    // What the runner sees at its paths (through /proc/<pid>/root, i.e. in its mount namespace).
    const seen = (file: string) => path.join(`/proc/${pid}/root`, file);
    expect((await stat(seen('/dev/system-disk'))).ino).toBe(image.ino);
    expect((await stat(seen('/dev/data-disk'))).ino).toBe((await stat(dataDisk)).ino);
    expect((await readFile(seen('/dev/data-disk'))).subarray(0, 18).toString()).toBe('VMOP-PRECREATED-PV');
    const configMap = await core.readNamespacedConfigMap({ name: VM, namespace: ns.name });
    expect(await readFile(seen('/etc/opt/vmrunner/config.yaml'), 'utf8')).toBe(
      configMap.data!['config.yaml'],
    );
  });

  it('swaps a changed ConfigMap into the pod volume atomically', async () => {
    const volume = path.join(podDir(await readPod()), 'volumes/config');
    const before = {
      target: await readlink(path.join(volume, '..data')),
      ino: (await stat(path.join(volume, '..data'))).ino,
    };
    await patchVm({ currentRam: '192Mi' });
    const changed = await eventually(async () => {
      const text = await readFile(path.join(volume, 'config.yaml'), 'utf8');
      expect(text).toMatch(/currentRam: 192Mi/);
      return text;
    });
    expect(changed).toBe(
      (await core.readNamespacedConfigMap({ name: VM, namespace: ns.name })).data!['config.yaml'],
    );
    expect(await readlink(path.join(volume, 'config.yaml'))).toBe('..data/config.yaml');
    expect(await readlink(path.join(volume, '..data'))).not.toBe(before.target);
    expect((await stat(path.join(volume, '..data'))).ino).not.toBe(before.ino);
  });

  it('restarts a killed runner and counts the restart', async () => {
    const killed = runnerPid(await readPod());
    process.kill(killed, 'SIGKILL');
    const pod = await runningPod(killed);
    const status = pod.status!.containerStatuses![0]!;
    expect(status.restartCount).toBe(1);
    expect(status.lastState?.terminated?.exitCode).toBe(137);
    expect(isAlive(killed)).toBe(false);
    // The new qemu truncates the console log when it starts, before the runner resumes the guest.
    await eventually(async () => {
      const log = await readFile(path.join(podDir(pod), 'runner.log'), 'utf8');
      expect(log.match(/"msg":"VM running"/g)).toHaveLength(2);
    }, BOOT_TIMEOUT_MS);
    await waitForConsoleLog(
      path.join(podDir(pod), 'run/vmrunner', VM, 'console.log'),
      TEST_GUEST_READY_MARKER,
    );
  });

  it('powers the VM down when it is set to Stopped: the runner exits 0 and the pod is deleted', async () => {
    const pod = await readPod();
    const pid = runnerPid(pod);
    await patchVm({ state: 'Stopped' });
    await eventually(() => expect(readPod()).rejects.toSatisfy(isNotFound), BOOT_TIMEOUT_MS);
    const exit = await node.waitForLog((l) => l.msg === 'runner exited' && l.runnerPid === pid);
    expect(exit.exitCode).toBe(0);
    expect(isAlive(pid)).toBe(false);
    expect(await readFile(path.join(podDir(pod), 'runner.log'), 'utf8')).toMatch(/"msg":"VM stopped"/);
    // Right after the deletion completes, the pod directory goes too, all but the log.
    await eventually(async () => expect(await readdir(podDir(pod))).toEqual(['runner.log']));
  });

  it('stops its runners and reports the node NotReady when it is stopped', async () => {
    const ready = await core.readNode({ name: nodeName });
    expect(ready.status?.conditions?.find((c) => c.type === 'Ready')?.status).toBe('True');
    expect(ready.spec?.taints ?? []).toEqual([]);
    await patchVm({ state: 'Running' });
    const pod = await runningPod();
    const pid = runnerPid(pod);
    await waitForConsoleLog(
      path.join(podDir(pod), 'run/vmrunner', VM, 'console.log'),
      TEST_GUEST_READY_MARKER,
    );

    expect(await node.stop('SIGTERM')).toBe(0);
    expect(isAlive(pid)).toBe(false);
    const stopped = await core.readNode({ name: nodeName });
    expect(stopped.status?.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'NodeAgentStopped',
    });
    const status = (await readPod()).status!.containerStatuses![0]!;
    expect(status.state?.waiting?.reason).toBe('NodeAgentStopped');
    expect(status.lastState?.terminated?.exitCode).toBe(0);
  });
});
