// The VirtualMachineSnapshot, VirtualMachineRestore, VirtualMachineClone and VirtualMachineSnapshotSchedule CRDs on a real apiserver: defaults, the
// immutable spec and the name bound are the apiserver's to enforce, with messages.
import { beforeAll, describe, expect, it } from 'vitest';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { applyError, createTestNamespace, kubectl, sharedKubeConfig } from '../../support/kube.js';

const snapshot = (namespace: string, name: string, vm: string) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineSnapshot
metadata: {name: ${name}, namespace: ${namespace}}
spec: {virtualMachineName: ${vm}}
`;
const restore = (namespace: string, snapshotName: string) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineRestore
metadata: {name: back, namespace: ${namespace}}
spec: {virtualMachineName: web, virtualMachineSnapshotName: ${snapshotName}}
`;

const clone = (namespace: string, newName: string) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineClone
metadata: {name: copy, namespace: ${namespace}}
spec: {virtualMachineSnapshotName: daily, newVirtualMachineName: ${newName}}
`;

const schedule = (namespace: string, name: string, spec: string) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineSnapshotSchedule
metadata: {name: ${name}, namespace: ${namespace}}
spec: ${spec}
`;

describe('VirtualMachineSnapshot, VirtualMachineRestore and VirtualMachineClone CRDs on a real apiserver', () => {
  let namespace: string;
  beforeAll(async () => {
    await installCrds(sharedKubeConfig());
    const ns = await createTestNamespace(sharedKubeConfig(), 'snapshot-crds');
    namespace = ns.name;
    return ns.cleanup;
  });

  it('a snapshot requires consistency unless told otherwise, and its spec cannot change', async () => {
    await kubectl(['apply', '-f', '-'], snapshot(namespace, 'daily', 'web'));
    expect(
      await kubectl([
        'get',
        'vmsnapshot',
        'daily',
        '-n',
        namespace,
        '-o',
        'jsonpath={.spec.requiredConsistency}',
      ]),
    ).toBe('true');
    expect(await applyError(snapshot(namespace, 'daily', 'other'))).toContain(
      'the spec of a snapshot is immutable',
    );
    expect(await applyError(snapshot(namespace, 'a'.repeat(53), 'web'))).toContain(
      'the name must have at most 52 characters',
    );
  });

  it('a restore stops no VM unless told, and its spec cannot change', async () => {
    await kubectl(['apply', '-f', '-'], restore(namespace, 'daily'));
    expect(
      await kubectl([
        'get',
        'vmrestore',
        'back',
        '-n',
        namespace,
        '-o',
        'jsonpath={.spec.stopVirtualMachine}',
      ]),
    ).toBe('false');
    expect(await applyError(restore(namespace, 'weekly'))).toContain('the spec of a restore is immutable');
  });

  it("a clone's new name must be one a VM can have, and its spec cannot change", async () => {
    expect(await applyError(clone(namespace, 'Not_A_Name'))).toContain('spec.newVirtualMachineName');
    expect(await applyError(clone(namespace, 'a'.repeat(53)))).toContain('spec.newVirtualMachineName');
    await kubectl(['apply', '-f', '-'], clone(namespace, 'web-2'));
    expect(await applyError(clone(namespace, 'web-3'))).toContain('the spec of a clone is immutable');
  });

  it('a snapshot schedule keeps at least one, knows the selector operators, and fails 3 times before it stops', async () => {
    expect(await applyError(schedule(namespace, 'none', '{schedule: "@daily", keep: 0}'))).toContain(
      'spec.keep',
    );
    expect(
      await applyError(
        schedule(
          namespace,
          'odd',
          '{schedule: "@daily", keep: 1, selector: {matchExpressions: [{key: tier, operator: Like}]}}',
        ),
      ),
    ).toContain('spec.selector.matchExpressions[0].operator');
    expect(await applyError(schedule(namespace, 'a'.repeat(64), '{schedule: "@daily", keep: 1}'))).toContain(
      'the name must have at most 63 characters',
    );
    await kubectl(['apply', '-f', '-'], schedule(namespace, 'nightly', '{schedule: "0 3 * * *", keep: 7}'));
    expect(
      await kubectl([
        'get',
        'vmsnapshotschedule',
        'nightly',
        '-n',
        namespace,
        '-o',
        'jsonpath={.spec.maxFailures} {.spec.suspend} {.spec.requiredConsistency}',
      ]),
    ).toBe('3 false true');
  });
});
