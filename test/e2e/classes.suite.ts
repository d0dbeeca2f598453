// VirtualMachineClasses on a real cluster (issue 41 §2): a VM of a class runs with the class's CPU
// model and requests its core fraction; one outside its class's policy does not start and says
// why; a changed class waits for the VM's restart; the default class is taken by VMs that name
// none; a class in use is deleted only once no VM uses it. Classes are cluster-wide: this suite's
// are its own and gone after it, and it marks a default only briefly, with Stopped VMs.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RUNNER_OVERHEAD } from '../../src/reconcilers/virtual-machine/runner-pod/pod.js';
import { useDevBed } from '../support/beds.js';
import { eventually } from '../support/eventually.js';
import { testGuestManifest, type ClusterVms } from '../support/cluster-vms.js';

const NAMESPACE = 'classes';
const CLASS = 'e2e-small';
const DEFAULT = 'e2e-default';
const DEFAULT_ANNOTATION = 'vmoperator.jdrupes.org/is-default-class';

const classManifest = (model: string) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineClass
metadata: {name: ${CLASS}}
spec:
  cpu: {type: Model, model: ${model}}
  sizingPolicies:
    - cores: {min: 1, max: 2}
      memory: {min: 128Mi, max: 1Gi}
      coreFractions: [10%, 50%, 100%]
      defaultCoreFraction: 10%
`;

describe('VirtualMachineClasses: what a VM of a class may be and runs with', () => {
  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE] });
  let vms: ClusterVms;
  const kubectl = (...args: string[]) => vms.kubectl(args);
  /** QEMU's command line in the VM's runner pod. */
  const qemuArgs = (name: string) =>
    vms.exec(name, [
      'node',
      '-e',
      `const fs = require('fs');
       for (const p of fs.readdirSync('/proc').filter((e) => /^\\d+$/.test(e))) {
         const argv = fs.readFileSync('/proc/' + p + '/cmdline', 'utf8').split('\\0');
         if (/qemu-system/.test(argv[0])) console.log(argv.join(' '));
       }`,
    ]);
  const classObject = async (name: string) => JSON.parse(await kubectl('get', 'vmclass', name, '-o', 'json'));

  beforeAll(() => {
    vms = bed.vms(NAMESPACE);
  });
  afterAll(async () => {
    await kubectl('delete', 'vmclass', CLASS, DEFAULT, '--ignore-not-found', '--wait=false').catch(() => '');
  });

  it("runs a VM of a class with the class's CPU model and its core fraction's CPU request", async () => {
    await vms.apply(classManifest('qemu64'));
    await vms.apply(
      testGuestManifest('sized', NAMESPACE).replace(
        '    state: Running',
        `    virtualMachineClassName: ${CLASS}\n    state: Running`,
      ),
    );
    await vms.waitForVm('sized', (vm) => expect(vms.condition(vm, 'Booted')?.status).toBe('True'));
    const pod = JSON.parse(
      await kubectl('get', 'pod', (await vms.getVm('sized')).status!.runnerPod!.name, '-o', 'json'),
    );
    // 10% (the policy's default) of its one CPU, and the runner's own share.
    expect(pod.spec.containers[0].resources.requests.cpu).toBe(`${100 + RUNNER_OVERHEAD.cpuMillis}m`);
    expect(await qemuArgs('sized')).toMatch(/ -cpu qemu64( |$)/m);
    expect((await classObject(CLASS)).status).toMatchObject({
      usedBy: [`${NAMESPACE}/sized`],
      usedByCount: 1,
    });
    // kubectl get vm -o wide says the class and the fraction the pod was made with.
    const wide = await kubectl('get', 'vm', 'sized', '-o', 'wide');
    expect(wide.split('\n')[0]).toMatch(/CORE FRACTION\s+RAM\s+CLASS\s+NEED RESTART\s+AGENT/);
    // fraction, RAM, class, need restart, agent
    expect(wide).toMatch(new RegExp(`sized\\s.*\\s10%\\s+\\S+\\s+${CLASS}\\s+\\S+\\s+True\\s`));
  });

  it("a VM outside its class's policy does not start and says why, naming the class and the policy", async () => {
    await vms.apply(
      testGuestManifest('too-big', NAMESPACE)
        .replace('    state: Running', `    virtualMachineClassName: ${CLASS}\n    state: Running`)
        .replace('maximumCpus: 2', 'maximumCpus: 3'),
    );
    const vm = await vms.waitForVm('too-big', (vm) =>
      expect(vms.condition(vm, 'SpecValid')?.status).toBe('False'),
    );
    expect(vms.condition(vm, 'SpecValid')?.message).toContain(
      `spec.vm.maximumCpus: 3 CPUs fall outside every sizing policy of VirtualMachineClass ${CLASS} (cores 1-2)`,
    );
    expect(vm.status?.runnerPod).toBeUndefined();
    await kubectl('delete', 'vm', 'too-big');
  });

  it("a changed class waits for the VM's restart, which then runs with it", async () => {
    const before = await vms.getVm('sized');
    await vms.apply(classManifest('max'));
    const waiting = await vms.waitForVm('sized', (vm) =>
      expect(vms.condition(vm, 'AwaitingRestartToApplyConfiguration')?.status).toBe('True'),
    );
    expect(waiting.status?.restartAwaitingChanges).toContainEqual(
      expect.objectContaining({ path: 'spec.vm.cpuModel', currentValue: 'qemu64', desiredValue: 'max' }),
    );
    expect(await qemuArgs('sized')).toMatch(/ -cpu qemu64( |$)/m);
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineOperation
metadata: {name: sized-restart, namespace: ${NAMESPACE}}
spec: {virtualMachineName: sized, type: Restart}
`);
    await vms.waitForVm('sized', (vm) => {
      expect(vm.status?.runner?.runId).not.toBe(before.status?.runner?.runId);
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
      expect(vms.condition(vm, 'AwaitingRestartToApplyConfiguration')?.status).toBe('False');
    });
    expect(await qemuArgs('sized')).toMatch(/ -cpu max( |$)/m);
  });

  it('a VM that names no class takes the default one; with two defaults it says so; a class in use is deleted only once unused', async () => {
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineClass
metadata: {name: ${DEFAULT}, annotations: {${DEFAULT_ANNOTATION}: "true"}}
spec:
  cpu: {type: Model, model: qemu64}
`);
    await vms.apply(testGuestManifest('plain', NAMESPACE));
    await vms.waitForVm('plain', (vm) => expect(vms.condition(vm, 'Booted')?.status).toBe('True'));
    expect(await qemuArgs('plain')).toMatch(/ -cpu qemu64( |$)/m);
    await eventually(async () =>
      expect((await classObject(DEFAULT)).status).toMatchObject({ usedBy: [`${NAMESPACE}/plain`] }),
    );
    // A second default: neither counts, and a VM that names none says why (and does not start).
    await kubectl('annotate', 'vmclass', CLASS, `${DEFAULT_ANNOTATION}=true`);
    await vms.apply(testGuestManifest('unnamed', NAMESPACE));
    const unnamed = await vms.waitForVm('unnamed', (vm) =>
      expect(vms.condition(vm, 'SpecValid')?.status).toBe('False'),
    );
    expect(vms.condition(unnamed, 'SpecValid')?.message).toContain(
      `several VirtualMachineClasses are marked default (${DEFAULT}, ${CLASS})`,
    );
    expect(unnamed.status?.runnerPod).toBeUndefined();
    await kubectl('delete', 'vm', 'unnamed');
    await kubectl('annotate', 'vmclass', CLASS, `${DEFAULT_ANNOTATION}-`);
    // Deleted while a VM runs with it: it stays, saying so, until that VM is gone.
    await kubectl('delete', 'vmclass', DEFAULT, '--wait=false');
    await eventually(async () => {
      const held = await classObject(DEFAULT);
      expect(held.metadata.deletionTimestamp).toBeDefined();
      expect(held.status.conditions).toContainEqual(
        expect.objectContaining({
          type: 'InUse',
          status: 'True',
          message: expect.stringMatching(/deleted once none does/),
        }),
      );
    });
    await kubectl('delete', 'vm', 'plain');
    await eventually(async () =>
      expect(await kubectl('get', 'vmclass', '-o', 'name')).not.toContain(DEFAULT),
    );
  });
});
