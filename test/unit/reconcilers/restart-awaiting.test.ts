import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { POD_SPEC_ANNOTATION } from '../../../src/reconcilers/virtual-machine/naming.js';
import {
  podSpecOfVm,
  restartAwaitingChanges,
} from '../../../src/reconcilers/virtual-machine/lifecycle/restart-awaiting.js';

const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));
const vmWith = (spec: Record<string, unknown> = {}) =>
  VirtualMachine.parse({
    ...seed,
    spec: { ...seed.spec, ...spec, vm: { ...seed.spec.vm, state: 'Running' } },
  });
const podFor = (vm: VirtualMachine) => ({
  metadata: {
    name: 'test-vm-0',
    uid: 'pod-1',
    annotations: { [POD_SPEC_ANNOTATION]: JSON.stringify(podSpecOfVm(vm)) },
  },
});

describe('restart-awaiting changes', () => {
  it('lists pod-level changes in spec terms, and nothing once the spec is back', () => {
    const started = vmWith();
    const pod = podFor(started);
    expect(restartAwaitingChanges(started, pod, undefined)).toEqual([]);
    const edited = vmWith({ nodeSelector: { zone: 'b' }, image: { source: 'registry/runner:2' } });
    expect(restartAwaitingChanges(edited, pod, undefined)).toEqual([
      { operation: 'add', path: 'spec.image', desiredValue: { source: 'registry/runner:2' } },
      { operation: 'add', path: 'spec.nodeSelector', desiredValue: { zone: 'b' } },
    ]);
    expect(restartAwaitingChanges(vmWith(), pod, undefined)).toEqual([]);
  });

  it('a different cloud-init Secret waits for a restart (it is a volume of the pod)', () => {
    const started = vmWith({ cloudInit: { secretRef: { name: 'a' } } });
    const pod = podFor(started);
    expect(restartAwaitingChanges(started, pod, undefined)).toEqual([]);
    expect(
      restartAwaitingChanges(vmWith({ cloudInit: { secretRef: { name: 'b' } } }), pod, undefined),
    ).toEqual([
      {
        operation: 'replace',
        path: 'spec.cloudInit.secretRef',
        currentValue: { name: 'a' },
        desiredValue: { name: 'b' },
      },
    ]);
  });

  it("maps the runner's config changes to spec paths, sizes as quantities", () => {
    const vm = vmWith();
    const snapshot = {
      restartChanges: [
        { field: 'vm.maximumRam', current: 2 ** 30, desired: 2 * 2 ** 30 },
        { field: 'vm.maximumCpus', current: 4, desired: 8 },
        { field: 'vm.sockets', current: 1, desired: 2 },
        { field: 'vm.network[1].ports[0].port', current: 22, desired: 2222 },
      ],
    } as RunnerSnapshot;
    expect(restartAwaitingChanges(vm, podFor(vm), snapshot)).toEqual([
      { operation: 'replace', path: 'spec.vm.maximumRam', currentValue: '1Gi', desiredValue: '2Gi' },
      { operation: 'replace', path: 'spec.vm.maximumCpus', currentValue: 4, desiredValue: 8 },
      { operation: 'replace', path: 'spec.vm.cpuTopology.sockets', currentValue: 1, desiredValue: 2 },
      {
        operation: 'replace',
        path: 'spec.vm.networks[1].user.ports[0].port',
        currentValue: 22,
        desiredValue: 2222,
      },
    ]);
  });

  it('ignores derived values (resources from currentRam) and has nothing while no pod runs', () => {
    const started = vmWith();
    const pod = podFor(started);
    const live = VirtualMachine.parse({
      ...seed,
      spec: { ...seed.spec, vm: { ...seed.spec.vm, state: 'Running', currentRam: '512Mi' } },
    });
    expect(restartAwaitingChanges(live, pod, undefined)).toEqual([]);
    expect(restartAwaitingChanges(vmWith({ nodeName: 'x' }), undefined, undefined)).toEqual([]);
  });
});
