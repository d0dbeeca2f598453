// VirtualMachineOperations against a real apiserver and Redis, with one manager process and no
// node: admission rules, refusals with their reasons, the one-at-a-time rule and superseding.
// (That operations complete on running guests is shown end to end: test/e2e/operations.test.ts.)
import { CustomObjectsApi } from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { eventually } from '../../support/eventually.js';
import {
  applyError,
  createTestNamespace,
  kubectl,
  sharedKubeConfig,
  type TestNamespace,
} from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';

const run = promisify(execFile);
const kubeConfig = sharedKubeConfig();
const custom = kubeConfig.makeApiClient(CustomObjectsApi);

interface Operation {
  metadata: {
    name: string;
    labels?: Record<string, string>;
    ownerReferences?: Array<{ kind: string; name: string }>;
  };
  status?: {
    phase?: string;
    reason?: string;
    message?: string;
    conditions?: Array<{ type: string; status: string }>;
  };
}

describe('VirtualMachineOperation (real apiserver, one manager, no node)', () => {
  let namespace: TestNamespace;
  let redis: RedisServer;
  let manager: ManagerProcess;
  const ns = () => namespace.name;
  const vmManifest = (name: string, spec: string, state = 'Stopped') => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${ns()}}
spec:
${spec}
  vm: {state: ${state}, maximumRam: 256Mi}
`;
  const opManifest = (
    name: string,
    vm: string,
    type: string,
    extra = '',
  ) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineOperation
metadata: {name: ${name}, namespace: ${ns()}}
spec: {virtualMachineName: ${vm}, type: ${type}${extra}}
`;
  const readOp = async (name: string) =>
    (await custom.getNamespacedCustomObject({
      group: 'vmoperator.jdrupes.org',
      version: 'v1',
      plural: 'virtualmachineoperations',
      namespace: ns(),
      name,
    })) as Operation;
  const opInPhase = (name: string, phase: string) =>
    eventually(async () => {
      const op = await readOp(name);
      expect(op.status?.phase).toBe(phase);
      return op;
    }, 30_000);
  const readVm = async (name: string) =>
    (await custom.getNamespacedCustomObject({
      group: 'vmoperator.jdrupes.org',
      version: 'v1',
      plural: 'vms',
      namespace: ns(),
      name,
    })) as { metadata: { annotations?: Record<string, string> }; spec: { vm: { state: string } } };

  beforeAll(async () => {
    await installCrds(kubeConfig);
    namespace = await createTestNamespace(kubeConfig, 'vmop-ops');
    redis = await startRedis();
    manager = startManagerProcess([
      '--kubeconfig',
      inject('kubeconfigPath'),
      '--redis',
      redis.url,
      '-n',
      ns(),
    ]);
    await manager.waitForLog((l) => l.msg === 'manager started');
  });

  afterAll(async () => {
    await manager?.stop();
    await redis?.stop();
    await namespace?.cleanup();
    expect(manager.logs.filter((l) => l.level >= 50)).toEqual([]);
  });

  it('admission refuses run policies that contradict the state, with the field', async () => {
    expect(await applyError(vmManifest('on-but-stopped', '  runPolicy: AlwaysOn'))).toContain(
      'spec.vm.state: Invalid value: "object": runPolicy AlwaysOn keeps the VM running: spec.vm.state must be Running',
    );
    expect(await applyError(vmManifest('off-but-running', '  runPolicy: AlwaysOff', 'Running'))).toContain(
      'runPolicy AlwaysOff keeps the VM off: spec.vm.state must be Stopped',
    );
    expect(
      await applyError(
        vmManifest('on-stops', '  runPolicy: AlwaysOn\n  guestShutdownStops: true', 'Running'),
      ),
    ).toContain(
      'spec.guestShutdownStops: Invalid value: "object": runPolicy AlwaysOn restarts a VM whose guest powered off',
    );
    expect(await applyError(vmManifest('manual', '  runPolicy: Manual'))).toBe('');
  });

  it('admission refuses force on a Start and any change of an operation', async () => {
    expect(await applyError(opManifest('forced-start', 'manual', 'Start', ', force: true'))).toContain(
      'spec.force: Invalid value: "object": force applies to Stop and Restart only',
    );
    await kubectl(['create', '-f', '-'], opManifest('immutable', 'no-such-vm', 'Stop'));
    expect(await applyError(opManifest('immutable', 'no-such-vm', 'Restart'))).toContain(
      'the spec of an operation is immutable',
    );
  });

  it('an operation for a VM that does not exist fails, saying so', async () => {
    const op = await opInPhase('immutable', 'Failed');
    expect(op.status).toMatchObject({
      reason: 'VirtualMachineNotFound',
      message: `VirtualMachine ${ns()}/no-such-vm does not exist`,
    });
  });

  it('Start tells the VM (state Running); the VM owns the operation; a second one fails at once, naming the first', async () => {
    await kubectl(['create', '-f', '-'], opManifest('start-1', 'manual', 'Start'));
    const started = await opInPhase('start-1', 'InProgress');
    expect(started.metadata.labels).toMatchObject({ 'vmoperator.jdrupes.org/vm': 'manual' });
    expect(started.metadata.ownerReferences?.[0]).toMatchObject({ kind: 'VirtualMachine', name: 'manual' });
    expect(started.status?.conditions?.find((c) => c.type === 'SignalSent')?.status).toBe('True');
    const vm = await readVm('manual');
    expect(vm.spec.vm.state).toBe('Running');
    expect(vm.metadata.annotations?.['vmoperator.jdrupes.org/operation']).toBe('start-1');

    await kubectl(['create', '-f', '-'], opManifest('restart-1', 'manual', 'Restart'));
    expect((await opInPhase('restart-1', 'Failed')).status).toMatchObject({
      reason: 'NotReadyToBeExecuted',
      message: 'operation start-1 (Start) is still in progress; this one was not carried out',
    });
  });

  it('a Stop supersedes the Start in flight, and completes when the VM is Stopped', async () => {
    await kubectl(['create', '-f', '-'], opManifest('stop-1', 'manual', 'Stop'));
    expect((await opInPhase('start-1', 'Superseded')).status).toMatchObject({
      reason: 'Superseded',
      message: 'superseded by stop-1 (Stop)',
    });
    // No node here: the runner pod was never scheduled, so it goes at once and the VM is Stopped.
    expect((await opInPhase('stop-1', 'Completed')).status?.reason).toBe('OperationCompleted');
    const vm = await readVm('manual');
    expect(vm.spec.vm.state).toBe('Stopped');
    expect(vm.metadata.annotations?.['vmoperator.jdrupes.org/operation']).toBeUndefined();
  });

  it('refuses what the run policy or the phase does not allow, with a Warning Event on the VM', async () => {
    await kubectl(['apply', '-f', '-'], vmManifest('always-on', '  runPolicy: AlwaysOn', 'Running'));
    await kubectl(['create', '-f', '-'], opManifest('stop-always-on', 'always-on', 'Stop'));
    expect((await opInPhase('stop-always-on', 'Failed')).status).toMatchObject({
      reason: 'NotApplicableForVirtualMachineRunPolicy',
      message: 'Stop is not applicable to a VM with runPolicy AlwaysOn',
    });
    await kubectl(['create', '-f', '-'], opManifest('reset-stopped', 'manual', 'Reset'));
    expect((await opInPhase('reset-stopped', 'Failed')).status).toMatchObject({
      reason: 'NotApplicableForVirtualMachinePhase',
      message: 'the VM is Stopped (spec.vm.state Stopped): Reset needs a running guest',
    });
    await eventually(async () => {
      const events = await kubectl([
        'get',
        'events',
        '-n',
        ns(),
        '--field-selector',
        'involvedObject.name=always-on',
        '-o',
        'json',
      ]);
      const messages = JSON.parse(events).items.map(
        (e: { reason: string; message: string }) => `${e.reason}: ${e.message}`,
      );
      expect(messages).toContain(
        'OperationFailed: Stop (VirtualMachineOperation stop-always-on): Stop is not applicable to a VM with runPolicy AlwaysOn',
      );
    }, 30_000);
  });

  it('`vmop vm` says why an operation was refused and exits 1, without the usage text; without a kubeconfig it says so', async () => {
    const vmop = (args: string[], env: NodeJS.ProcessEnv) =>
      run('bin/vmop', ['vm', ...args], { env }).then(
        ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
    const withKubeconfig = { ...process.env, KUBECONFIG: inject('kubeconfigPath') };
    const refused = await vmop(['migrate', 'manual', '-n', ns(), '--to', 'nope', '--wait'], withKubeconfig);
    expect(refused).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(
        /manual-migrate-\w+: Failed \(the VM is Stopped .*only a running VM migrates\)\n$/,
      ),
    });
    expect(refused.stderr).not.toMatch(/Usage:/);
    const { KUBECONFIG: _none, ...noKubeconfig } = process.env;
    const lost = await vmop(['list'], {
      ...noKubeconfig,
      HOME: await mkdtemp(path.join(os.tmpdir(), 'no-home-')),
    });
    expect(lost).toMatchObject({
      code: 1,
      stderr:
        'vmop vm: no kubeconfig found: give --kubeconfig, set KUBECONFIG, or write ~/.kube/config (nor does this run in a pod)\n',
    });
  });
});
