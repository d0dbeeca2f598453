// A VM and its VirtualMachineClass (reconcilers/virtual-machine/class/vm-class.ts): which class
// applies, what the class refuses (naming the class and policy), and the runner made from it.
import { describe, expect, it } from 'vitest';
import { VirtualMachineClass } from '../../../src/api/virtual-machine-class.js';
import {
  chooseClass,
  classErrors,
  withClass,
} from '../../../src/reconcilers/virtual-machine/class/vm-class.js';
import { desiredRunnerConfig } from '../../../src/reconcilers/virtual-machine/runner-config/config.js';
import { runnerResources } from '../../../src/reconcilers/virtual-machine/runner-pod/pod.js';
import { testVm } from './vm-steps/vm-state-fixture.js';

const vmClass = (name: string, spec: Record<string, unknown>, isDefault = false) =>
  VirtualMachineClass.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineClass',
    metadata: {
      name,
      ...(isDefault && { annotations: { 'vmoperator.jdrupes.org/is-default-class': 'true' } }),
    },
    spec,
  });

const small = vmClass('small', {
  cpu: { type: 'Model', model: 'qemu64', allowedModels: ['max'] },
  sizingPolicies: [
    {
      cores: { min: 1, max: 4 },
      memory: { min: '256Mi', max: '4Gi', perCore: { max: '1Gi' } },
      coreFractions: ['10%', '50%', '100%'],
      defaultCoreFraction: '10%',
    },
    { cores: { min: 6, max: 16, step: 2 }, memory: { step: '1Gi' } },
  ],
  nodeSelector: { matchLabels: { 'vmop.test/pool': 'small' } },
  tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'vms', effect: 'NoSchedule' }],
});
const host = vmClass('host', { cpu: { type: 'Host' } }, true);

describe('a VM of a VirtualMachineClass', () => {
  it('is of the class it names, else of the one default; a missing class or two defaults say so', () => {
    expect(chooseClass(testVm({ virtualMachineClassName: 'small' }), [small, host]).class).toBe(small);
    expect(chooseClass(testVm(), [small, host]).class).toBe(host);
    expect(chooseClass(testVm(), [small]).class).toBeUndefined();
    expect(chooseClass(testVm({ virtualMachineClassName: 'big' }), [small]).error).toBe(
      'spec.vm.virtualMachineClassName: VirtualMachineClass big does not exist (yet)',
    );
    const other = vmClass('other', { cpu: { type: 'Host' } }, true);
    expect(chooseClass(testVm(), [host, other]).error).toMatch(
      /several VirtualMachineClasses are marked default \(host, other\)/,
    );
  });

  it("is refused what the class's policy does not allow, naming the class and the policy", () => {
    const errors = (vm: Record<string, unknown>) =>
      classErrors(testVm({ virtualMachineClassName: 'small', ...vm }), small);
    expect(errors({ maximumCpus: 2, maximumRam: '1Gi' })).toEqual([]);
    expect(errors({ maximumCpus: 2, maximumRam: '1Gi', cpuModel: 'max' })).toEqual([]);
    expect(errors({ maximumCpus: 2, maximumRam: '1Gi', cpuModel: 'host' })).toEqual([
      'spec.vm.cpuModel: host is not allowed by VirtualMachineClass small (allowed: qemu64, max)',
    ]);
    expect(errors({ maximumCpus: 5, maximumRam: '1Gi' })).toEqual([
      'spec.vm.maximumCpus: 5 CPUs fall outside every sizing policy of VirtualMachineClass small (cores 1-4, 6-16)',
    ]);
    expect(errors({ maximumCpus: 7, maximumRam: '2Gi' })).toEqual([
      'spec.vm.maximumCpus: 7 CPUs are not allowed by the sizing policy for cores 6-16 of VirtualMachineClass small: from 6 in steps of 2',
    ]);
    expect(errors({ maximumCpus: 2, maximumRam: '8Gi' })).toEqual([
      'spec.vm.maximumRam: 8Gi is outside 256Mi-4Gi of the sizing policy for cores 1-4 of VirtualMachineClass small',
      'spec.vm.maximumRam: 8Gi for 2 CPUs is outside 0-1Gi per core of the sizing policy for cores 1-4 of VirtualMachineClass small',
    ]);
    expect(errors({ maximumCpus: 2, maximumRam: '1Gi', coreFraction: '20%' })).toEqual([
      'spec.vm.coreFraction: 20% is not allowed by the sizing policy for cores 1-4 of VirtualMachineClass small (allowed: 10%, 50%, 100%)',
    ]);
  });

  it("runs with the class's CPU model, node labels and tolerations, and requests its core fraction", () => {
    const vm = withClass(
      testVm({ virtualMachineClassName: 'small', maximumCpus: 2, maximumRam: '1Gi' }),
      small,
    );
    expect(desiredRunnerConfig(vm, { hasDisplaySecret: true })['/Runner'].vm.cpuModel).toBe('qemu64');
    expect(vm.spec.nodeSelector).toEqual({ 'vmop.test/pool': 'small' });
    expect(vm.spec.tolerations).toEqual([
      { key: 'dedicated', operator: 'Equal', value: 'vms', effect: 'NoSchedule' },
    ]);
    // 10% (the policy's default) of 2 CPUs, plus the runner's own share.
    const request = (of: typeof vm) => runnerResources(of).requests!.cpu!;
    const overhead =
      Number(request(withClass(testVm({ maximumCpus: 2, coreFraction: '100%' }), undefined)).slice(0, -1)) -
      2000;
    expect(request(vm)).toBe(`${200 + overhead}m`);
    // The VM's own fraction and model win; without a class, the VM is as it says (overcommit 2: half).
    const own = withClass(
      testVm({ virtualMachineClassName: 'small', maximumCpus: 2, coreFraction: '50%', cpuModel: 'max' }),
      small,
    );
    expect(request(own)).toBe(`${1000 + overhead}m`);
    expect(desiredRunnerConfig(own, { hasDisplaySecret: true })['/Runner'].vm.cpuModel).toBe('max');
    expect(request(withClass(testVm({ maximumCpus: 2 }), undefined))).toBe(`${1000 + overhead}m`);
    expect(
      desiredRunnerConfig(withClass(testVm(), host), { hasDisplaySecret: true })['/Runner'].vm.cpuModel,
    ).toBe('host');
    // A class without policies: a whole core per CPU.
    expect(request(withClass(testVm({ maximumCpus: 2 }), host))).toBe(`${2000 + overhead}m`);
  });

  it("adds the class's node expressions to each of the VM's required node terms, or makes one", () => {
    const zoned = vmClass('zoned', {
      cpu: { type: 'Host' },
      nodeSelector: { matchExpressions: [{ key: 'vmop.test/zone', operator: 'In', values: ['a', 'b'] }] },
    });
    const zone = { key: 'vmop.test/zone', operator: 'In', values: ['a', 'b'] };
    const required = (vm: ReturnType<typeof testVm>) =>
      vm.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
    expect(required(withClass(testVm(), zoned))).toEqual([{ matchExpressions: [zone] }]);
    const gpu = { key: 'vmop.test/gpu', operator: 'Exists' };
    const ssd = { key: 'vmop.test/disk', operator: 'In', values: ['ssd'] };
    const own = testVm({}, {}) as ReturnType<typeof testVm>;
    own.spec.affinity = {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [{ matchExpressions: [gpu] }, { matchExpressions: [ssd] }],
        },
      },
    };
    expect(required(withClass(own, zoned))).toEqual([
      { matchExpressions: [gpu, zone] },
      { matchExpressions: [ssd, zone] },
    ]);
  });
});
