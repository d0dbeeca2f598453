// A VM and its VirtualMachineClass (api/virtual-machine-class.ts), pure: which class applies, what
// of the VM breaks the class's policy (said in SpecValid, naming the policy), and the VM as its
// runner is made from it (the class's CPU model as default, its core fraction, node selector and
// tolerations).
import { parseMemorySize } from '../../../api/runner-config.js';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import type { KubernetesObject } from '@kubernetes/client-node';
import {
  CLASS_KIND,
  VirtualMachineClass,
  isDefaultClass,
  type SizingPolicy,
} from '../../../api/virtual-machine-class.js';
import type { ObjectCache } from '../../../kube/object-cache.js';
import { maximumCpus } from '../runner-config/config.js';

/** The VirtualMachineClasses the watches hold (those the schema accepts). */
export const cachedClasses = (cache: ObjectCache): VirtualMachineClass[] =>
  cache
    .list<KubernetesObject>(CLASS_KIND, undefined)
    .flatMap((cached) => VirtualMachineClass.safeParse(cached).data ?? []);

export type ClassChoice =
  | { class: VirtualMachineClass; error?: undefined }
  | { class?: undefined; error: string }
  /** No class named and no default: the VM is as it says, the chart's CPU overcommit applies. */
  | { class?: undefined; error?: undefined };

/** The class a VM names, else the one default class. */
export function chooseClass(vm: VirtualMachine, classes: readonly VirtualMachineClass[]): ClassChoice {
  const named = vm.spec.vm.virtualMachineClassName;
  if (named) {
    const found = classes.find((c) => c.metadata.name === named);
    if (!found)
      return { error: `spec.vm.virtualMachineClassName: VirtualMachineClass ${named} does not exist (yet)` };
    if (found.metadata.deletionTimestamp && !vm.status?.runnerPod)
      return { error: `spec.vm.virtualMachineClassName: VirtualMachineClass ${named} is being deleted` };
    return { class: found };
  }
  const defaults = classes.filter(isDefaultClass).filter((c) => !c.metadata.deletionTimestamp);
  if (defaults.length > 1)
    return {
      error: `no spec.vm.virtualMachineClassName, and several VirtualMachineClasses are marked default (${defaults
        .map((c) => c.metadata.name)
        .sort()
        .join(', ')}): name one, or leave one default`,
    };
  return defaults.length === 1 ? { class: defaults[0]! } : {};
}

/** The class's own CPU model (QEMU's name). */
export const classCpuModel = (vmClass: VirtualMachineClass) =>
  vmClass.spec.cpu.type === 'Host' ? 'host' : vmClass.spec.cpu.model!;

const percent = (fraction: string) => Number(fraction.slice(0, -1));
/** As the admission policy (helm/vmop/templates/class-policy.yaml) words it too. */
const describePolicy = (vmClass: VirtualMachineClass, policy: SizingPolicy) =>
  `the sizing policy for cores ${policy.cores.min}-${policy.cores.max} of VirtualMachineClass ${vmClass.metadata.name}`;

/** The policy whose cores range the VM's CPUs fall in. */
function policyOf(vm: VirtualMachine, vmClass: VirtualMachineClass) {
  const cores = maximumCpus(vm.spec.vm);
  const policy = vmClass.spec.sizingPolicies.find((p) => cores >= p.cores.min && cores <= p.cores.max);
  return policy && { policy };
}

/** What of the VM its class does not allow, each naming the class (and policy). */
export function classErrors(vm: VirtualMachine, vmClass: VirtualMachineClass): string[] {
  const errors: string[] = [];
  const name = vmClass.metadata.name;
  const { cpuModel, coreFraction } = vm.spec.vm;
  const own = classCpuModel(vmClass);
  const allowed = [own, ...(vmClass.spec.cpu.allowedModels ?? [])];
  if (cpuModel !== undefined && !allowed.includes(cpuModel))
    errors.push(
      `spec.vm.cpuModel: ${cpuModel} is not allowed by VirtualMachineClass ${name} (allowed: ${allowed.join(', ')})`,
    );
  const policies = vmClass.spec.sizingPolicies;
  if (policies.length === 0) return errors;
  const cores = maximumCpus(vm.spec.vm);
  const matched = policyOf(vm, vmClass);
  if (!matched) {
    const ranges = policies.map((p) => `${p.cores.min}-${p.cores.max}`).join(', ');
    return [
      ...errors,
      `spec.vm.maximumCpus: ${cores} CPUs fall outside every sizing policy of VirtualMachineClass ${name} (cores ${ranges})`,
    ];
  }
  const { policy } = matched;
  const where = describePolicy(vmClass, policy);
  const step = policy.cores.step;
  if (step && (cores - policy.cores.min) % step !== 0)
    errors.push(
      `spec.vm.maximumCpus: ${cores} CPUs are not allowed by ${where}: from ${policy.cores.min} in steps of ${step}`,
    );
  const ram = parseMemorySize(String(vm.spec.vm.maximumRam)) ?? 0;
  const bytes = (quantity: string | number | undefined) =>
    quantity === undefined ? undefined : parseMemorySize(String(quantity));
  const memory = policy.memory;
  if (memory) {
    const [min, max, memoryStep] = [bytes(memory.min), bytes(memory.max), bytes(memory.step)];
    if ((min !== undefined && ram < min) || (max !== undefined && ram > max))
      errors.push(
        `spec.vm.maximumRam: ${vm.spec.vm.maximumRam} is outside ${memory.min ?? 0}-${memory.max ?? '∞'} of ${where}`,
      );
    if (memoryStep && (ram - (min ?? 0)) % memoryStep !== 0)
      errors.push(
        `spec.vm.maximumRam: ${vm.spec.vm.maximumRam} is not a step of ${memory.step} from ${memory.min ?? 0} in ${where}`,
      );
    const [perCoreMin, perCoreMax] = [bytes(memory.perCore?.min), bytes(memory.perCore?.max)];
    if (
      (perCoreMin !== undefined && ram < perCoreMin * cores) ||
      (perCoreMax !== undefined && ram > perCoreMax * cores)
    )
      errors.push(
        `spec.vm.maximumRam: ${vm.spec.vm.maximumRam} for ${cores} CPUs is outside ${memory.perCore?.min ?? 0}-${memory.perCore?.max ?? '∞'} per core of ${where}`,
      );
  }
  const fractions = policy.coreFractions;
  if (coreFraction !== undefined && fractions && !fractions.includes(coreFraction))
    errors.push(
      `spec.vm.coreFraction: ${coreFraction} is not allowed by ${where} (allowed: ${fractions.join(', ')})`,
    );
  return errors;
}

/** The core fraction a VM requests (percent): its own, else its policy's default, else none (overcommit). */
export function effectiveCoreFraction(
  vm: VirtualMachine,
  vmClass: VirtualMachineClass | undefined,
): number | undefined {
  if (vm.spec.vm.coreFraction) return percent(vm.spec.vm.coreFraction);
  if (!vmClass) return undefined;
  const fraction = policyOf(vm, vmClass)?.policy.defaultCoreFraction;
  return fraction ? percent(fraction) : 100;
}

/**
 * The VM as its runner is made from it: the class's CPU model where the VM names none, the core
 * fraction it requests, the class's node labels and tolerations under the VM's own.
 */
export function withClass(vm: VirtualMachine, vmClass: VirtualMachineClass | undefined): VirtualMachine {
  const fraction = effectiveCoreFraction(vm, vmClass);
  const spec = { ...vm.spec, vm: { ...vm.spec.vm } };
  if (fraction !== undefined) spec.vm.coreFraction = `${fraction}%`;
  if (vmClass) {
    spec.vm.virtualMachineClassName = vmClass.metadata.name; // also the default one, for the pod's label
    spec.vm.cpuModel ??= classCpuModel(vmClass);
    const labels = vmClass.spec.nodeSelector?.matchLabels;
    if (labels) spec.nodeSelector = { ...labels, ...vm.spec.nodeSelector };
    const expressions = vmClass.spec.nodeSelector?.matchExpressions ?? [];
    if (expressions.length > 0) spec.affinity = withNodeExpressions(vm.spec.affinity, expressions);
    const tolerations = vmClass.spec.tolerations ?? [];
    if (tolerations.length > 0) spec.tolerations = [...(vm.spec.tolerations ?? []), ...tolerations];
  }
  return { ...vm, spec };
}

type Affinity = NonNullable<VirtualMachine['spec']['affinity']>;
type NodeExpression = NonNullable<Affinity['nodeAffinity']>['requiredDuringSchedulingIgnoredDuringExecution'];

/** The class's node expressions in each of the VM's required node terms (terms are ORed, a term's expressions ANDed). */
function withNodeExpressions(
  affinity: Affinity | undefined,
  expressions: NonNullable<NonNullable<NodeExpression>['nodeSelectorTerms'][number]['matchExpressions']>,
): Affinity {
  const required = affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
  const terms = required?.nodeSelectorTerms.length ? required.nodeSelectorTerms : [{}];
  return {
    ...affinity,
    nodeAffinity: {
      ...affinity?.nodeAffinity,
      requiredDuringSchedulingIgnoredDuringExecution: {
        nodeSelectorTerms: terms.map((term) => ({
          ...term,
          matchExpressions: [...(term.matchExpressions ?? []), ...expressions],
        })),
      },
    },
  };
}
