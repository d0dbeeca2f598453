// The chart's admission policy for VirtualMachineClasses (helm/vmop/templates/class-policy.yaml),
// rendered by helm and applied to a real apiserver: a VM outside its class's policy is refused
// when applied, with the message the managers put in SpecValid for it (class/vm-class.ts). The
// binding is confined to this test's namespace (the control plane is shared with other files).
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { VirtualMachineClass } from '../../../src/api/virtual-machine-class.js';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { classErrors } from '../../../src/reconcilers/virtual-machine/class/vm-class.js';
import { eventually } from '../../support/eventually.js';
import { helmBinary } from '../../support/helm-bed.js';
import { createTestNamespace, kubectl, sharedKubeConfig } from '../../support/kube.js';

const run = promisify(execFile);
const suffix = randomBytes(3).toString('hex');
const CLASS = `small-${suffix}`;
const RELEASE = `classes-${suffix}`;

const classObject = {
  apiVersion: 'vmoperator.jdrupes.org/v1',
  kind: 'VirtualMachineClass',
  metadata: { name: CLASS },
  spec: {
    cpu: { type: 'Model', model: 'qemu64', allowedModels: ['max'] },
    sizingPolicies: [
      {
        cores: { min: 1, max: 4 },
        memory: { min: '256Mi', max: '4Gi', perCore: { max: '1Gi' } },
        coreFractions: ['10%', '50%', '100%'],
      },
      { cores: { min: 6, max: 16, step: 2 } },
    ],
  },
};

describe("the chart's admission policy for VirtualMachineClasses, on a real apiserver", () => {
  let namespace: string;

  beforeAll(async () => {
    const kubeConfig = sharedKubeConfig();
    await installCrds(kubeConfig);
    const ns = await createTestNamespace(kubeConfig, 'classes');
    namespace = ns.name;
    const { stdout } = await run(await helmBinary(), [
      ...['template', RELEASE, 'helm/vmop', '--show-only', 'templates/class-policy.yaml'],
    ]);
    const [policy, binding] = parseAllDocuments(stdout).map((doc) => doc.toJSON());
    binding.spec.matchResources = {
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } },
    };
    await kubectl(
      ['apply', '-f', '-'],
      [policy, binding, classObject].map((o) => stringify(o)).join('---\n'),
    );
    return async () => {
      await kubectl(['delete', 'validatingadmissionpolicybinding', binding.metadata.name]);
      await kubectl(['delete', 'validatingadmissionpolicy', policy.metadata.name]);
      await kubectl(['delete', 'virtualmachineclass', CLASS, '--wait=false']);
      await ns.cleanup();
    };
  });

  const vm = (spec: Record<string, unknown>) => ({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'sized', namespace },
    spec: { vm: { virtualMachineClassName: CLASS, ...spec } },
  });
  /** The apiserver's refusal of `manifest` (server-side dry run), or '' when it admits it. */
  const refusal = (manifest: object) =>
    kubectl(['apply', '--dry-run=server', '-f', '-'], stringify(manifest)).then(
      () => '',
      (err: { stderr: string }) => err.stderr,
    );

  it('admits a VM its class allows, and one of another class or none', async () => {
    // The policy takes a moment to apply after it is made: wait until it refuses.
    await eventually(async () => expect(await refusal(vm({ maximumCpus: 5 }))).toMatch(/denied request/));
    expect(
      await refusal(vm({ maximumCpus: 2, maximumRam: '1Gi', coreFraction: '10%', cpuModel: 'max' })),
    ).toBe('');
    expect(await refusal(vm({ maximumCpus: 8, maximumRam: '1Gi' }))).toBe('');
    expect(await refusal({ ...vm({ maximumCpus: 5 }), spec: { vm: { maximumCpus: 5 } } })).toBe('');
  });

  it("refuses each breach of the policy with the managers' message, naming the class and the policy", async () => {
    const ofClass = VirtualMachineClass.parse(classObject);
    for (const spec of [
      { maximumCpus: 2, maximumRam: '1Gi', cpuModel: 'host' },
      { maximumCpus: 5, maximumRam: '1Gi' },
      { cpuTopology: { sockets: 1, coresPerDie: 5 }, maximumRam: '1Gi' },
      { maximumCpus: 7, maximumRam: '1Gi' },
      { maximumCpus: 2, maximumRam: '8Gi' },
      { maximumCpus: 2, maximumRam: '3Gi' },
      { maximumCpus: 2, maximumRam: '1Gi', coreFraction: '20%' },
    ]) {
      const manifest = vm(spec);
      const expected = classErrors(VirtualMachine.parse(manifest), ofClass);
      expect(expected.length, JSON.stringify(spec)).toBeGreaterThan(0);
      const refused = await refusal(manifest);
      expect(refused, JSON.stringify(spec)).toContain(expected[0]!);
    }
  });

  it('refuses a class whose policies cover one CPU count twice', async () => {
    const overlapping = {
      apiVersion: 'vmoperator.jdrupes.org/v1',
      kind: 'VirtualMachineClass',
      metadata: { name: `${CLASS}-overlapping` },
      spec: {
        cpu: { type: 'Host' },
        sizingPolicies: [{ cores: { min: 1, max: 4 } }, { cores: { min: 4, max: 8 } }],
      },
    };
    expect(await refusal(overlapping)).toContain('sizingPolicies: the cores ranges of two policies overlap');
    overlapping.spec.sizingPolicies[1]!.cores.min = 5;
    expect(await refusal(overlapping)).toBe('');
  });
});
