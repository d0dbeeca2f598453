// The VirtualMachineClass custom resource (cluster-wide, as Deckhouse's): what an admin allows a VM
// of the class to be — its CPU model, sizes (cores, memory, the share of a core it requests) — and
// where its runner pods go. A VM names its class in `spec.vm.virtualMachineClassName`; one class
// may be the default (by annotation) for VMs that name none. Classes apply when a runner pod is
// made, so a changed class reaches a running VM at its next start.
import { z } from 'zod';
import { LabelSelectorRequirement, Quantity, Toleration } from './kubernetes-types.js';
import { Condition, CoreFraction, GROUP, ObjectMeta, VERSION } from './virtual-machine.js';

export const CLASS_KIND = 'VirtualMachineClass';
export const CLASS_PLURAL = 'virtualmachineclasses';
export const CLASS_SINGULAR = 'virtualmachineclass';
export const CLASS_SHORT_NAMES = ['vmclass', 'vmc'];

/** `"true"` on at most one class makes it the class of VMs that name none. */
export const DEFAULT_CLASS_ANNOTATION = 'vmoperator.jdrupes.org/is-default-class';
/** On a runner pod: the class it was made from. */
export const CLASS_LABEL = 'vmoperator.jdrupes.org/class';
/** Kept on a class while VMs use it, so it cannot be deleted from under them. */
export const CLASS_IN_USE_FINALIZER = 'vmoperator.jdrupes.org/class-in-use';

const ClassCpu = z
  .object({
    type: z
      .enum(['Host', 'Model'])
      .describe("Host: the node's CPU as QEMU's `host` model (KVM); Model: the named QEMU model."),
    model: z.string().max(128).optional().describe('The QEMU CPU model of type Model, e.g. Skylake-Server.'),
    allowedModels: z
      .array(z.string().max(128))
      .max(32)
      .optional()
      .describe("Other models a VM of the class may choose in spec.vm.cpuModel (besides the class's own)."),
  })
  .meta({
    'x-kubernetes-validations': [
      {
        rule: "self.type == 'Model' ? has(self.model) : !has(self.model)",
        message: 'cpu.model is required for type Model and not allowed for type Host',
      },
    ],
  });

const Range = <T extends z.ZodType>(value: T) =>
  z.object({ min: value.optional(), max: value.optional(), step: value.optional() });

export const SizingPolicy = z
  .object({
    cores: z
      .object({
        min: z.number().int().min(1).max(1024),
        max: z.number().int().min(1).max(1024),
        step: z.number().int().min(1).max(1024).optional(),
      })
      .meta({
        'x-kubernetes-validations': [
          { rule: 'self.min <= self.max', message: 'cores.min must not exceed cores.max' },
        ],
      })
      .describe('The range of CPUs (spec.vm.maximumCpus) this policy is for.'),
    memory: Range(Quantity)
      .extend({ perCore: z.object({ min: Quantity.optional(), max: Quantity.optional() }).optional() })
      .optional()
      .describe('What spec.vm.maximumRam may be for these cores: in all, and per core.'),
    coreFractions: z
      .array(CoreFraction)
      .max(100)
      .optional()
      .describe('The core fractions a VM may request (spec.vm.coreFraction); any when absent.'),
    defaultCoreFraction: CoreFraction.optional().describe('For a VM that names none; 100% when absent.'),
  })
  .describe('Sizes allowed for VMs whose CPU count falls in cores.');

export const ClassSpec = z
  .object({
    cpu: ClassCpu,
    sizingPolicies: z
      .array(SizingPolicy)
      .max(16)
      .default([])
      .describe("A VM must fall in one policy's cores range and meet it; none: any size."),
    nodeSelector: z
      .object({
        matchLabels: z.record(z.string(), z.string()).optional(),
        matchExpressions: z
          .array(
            LabelSelectorRequirement.extend({
              operator: z.enum(['In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt', 'Lt']),
            }),
          )
          .max(32)
          .optional()
          .describe("Node label expressions, added to each of the VM's own required node affinity terms."),
      })
      .optional()
      .describe("The runner pods' nodes: labels (merged under the VM's own nodeSelector) and expressions."),
    tolerations: z.array(Toleration).optional().describe("Added to the runner pods' (the VM's own win)."),
  })
  .meta({
    'x-kubernetes-validations': [
      {
        // Deckhouse's rule too: a VM's CPU count must name one policy.
        rule: 'self.sizingPolicies.all(a, self.sizingPolicies.exists_one(b, b.cores.min <= a.cores.max && a.cores.min <= b.cores.max))',
        message: 'sizingPolicies: the cores ranges of two policies overlap',
        fieldPath: '.sizingPolicies',
      },
    ],
  });

export const ClassStatus = z.object({
  /** VMs that use the class (`namespace/name`), at most a few listed. */
  usedBy: z.array(z.string()).optional(),
  usedByCount: z.number().int().optional(),
  conditions: z.array(Condition).optional(),
  observedGeneration: z.number().int().optional(),
});

export const VirtualMachineClass = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(CLASS_KIND),
  metadata: ObjectMeta,
  spec: ClassSpec,
  status: ClassStatus.optional(),
});

export type VirtualMachineClass = z.infer<typeof VirtualMachineClass>;
export type SizingPolicy = z.infer<typeof SizingPolicy>;

/** The work-queue key of a class. */
export const classKey = (name: string) => `vmclass:${name}`;

export const isDefaultClass = (vmClass: { metadata?: { annotations?: Record<string, string> } }) =>
  vmClass.metadata?.annotations?.[DEFAULT_CLASS_ANNOTATION] === 'true';
