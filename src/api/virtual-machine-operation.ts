// The VirtualMachineOperation custom resource (short name vmop): an imperative, recorded request
// to start, stop, restart, reset or evict one VM, as Deckhouse's VMOP. The zod schema is the
// source of the TypeScript types, the runtime validation and the generated CRD.
import { z } from 'zod';
import { Condition, GROUP, ObjectMeta, VERSION } from './virtual-machine.js';

export const OPERATION_KIND = 'VirtualMachineOperation';
export const OPERATION_PLURAL = 'virtualmachineoperations';
export const OPERATION_SINGULAR = 'virtualmachineoperation';
export const OPERATION_SHORT_NAME = 'vmop';

export const OperationType = z.enum(['Start', 'Stop', 'Restart', 'Reset', 'Evict', 'Migrate']);

export const OperationSpec = z
  .object({
    virtualMachineName: z.string().min(1).max(253).describe('The VM (in the same namespace) to operate on.'),
    type: OperationType.describe(
      'Start, Stop, Restart, Reset (a hard reset of the running guest), Migrate (move the running guest live to another node) or Evict (Migrate when the VM can, else stop it and start it wherever placement allows, through the eviction API).',
    ),
    migrate: z
      .object({
        nodeName: z
          .string()
          .min(1)
          .max(253)
          .optional()
          .describe('The node to move to; any other node when absent.'),
      })
      .optional()
      .describe('Migrate only.'),
    force: z
      .boolean()
      .optional()
      .describe('Stop and Restart only: do not wait for the guest to power down (skips powerdownTimeout).'),
  })
  .meta({
    'x-kubernetes-validations': [
      { rule: 'self == oldSelf', message: 'the spec of an operation is immutable' },
      {
        rule: "!has(self.force) || !self.force || self.type == 'Stop' || self.type == 'Restart'",
        message: 'force applies to Stop and Restart only',
        fieldPath: '.force',
      },
      {
        rule: "!has(self.migrate) || self.type == 'Migrate'",
        message: 'migrate applies to Migrate only',
        fieldPath: '.migrate',
      },
    ],
  });

export const OperationPhase = z.enum(['Pending', 'InProgress', 'Completed', 'Failed', 'Superseded']);

export const OperationStatus = z.object({
  phase: OperationPhase.optional(),
  /** The Completed condition's reason and message, repeated for `kubectl get -o wide`. */
  reason: z.string().optional(),
  message: z.string().optional(),
  conditions: z.array(Condition).optional(),
  /** When the VM was told (its state rewritten, its runner pod deleted, its reset requested). */
  signalledAt: z.string().optional(),
  /** The runner pod the VM had when the operation was signalled: a Restart or Evict waits for another. */
  podName: z.string().optional(),
  podUid: z.string().optional(),
  node: z.string().optional(),
  /** Evict: whether the VM is moved live (true) or cold (false); Migrate: true. */
  live: z.boolean().optional(),
  /** Evict: why it moves live or not. */
  liveReason: z.string().optional(),
  /** The live migration's id (the VM's status.migrationState.id). */
  migrationId: z.string().optional(),
  completedAt: z.string().optional(),
});

export const VirtualMachineOperation = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(OPERATION_KIND),
  metadata: ObjectMeta.extend({
    creationTimestamp: z.union([z.string(), z.date()]).optional(),
    ownerReferences: z
      .array(
        z.object({
          apiVersion: z.string(),
          kind: z.string(),
          name: z.string(),
          uid: z.string(),
          controller: z.boolean().optional(),
          blockOwnerDeletion: z.boolean().optional(),
        }),
      )
      .optional(),
  }),
  spec: OperationSpec,
  status: OperationStatus.optional(),
});

export type OperationType = z.infer<typeof OperationType>;
export type OperationPhase = z.infer<typeof OperationPhase>;
export type OperationStatus = z.infer<typeof OperationStatus>;
export type VirtualMachineOperation = z.infer<typeof VirtualMachineOperation>;

export const FINISHED_PHASES: readonly OperationPhase[] = ['Completed', 'Failed', 'Superseded'];

export function isFinished(op: Pick<VirtualMachineOperation, 'status'>): boolean {
  return FINISHED_PHASES.includes(op.status?.phase ?? 'Pending');
}

interface OperationsRef {
  group: string;
  version: string;
  plural: string;
  namespace: string;
}

/** Operations of a namespace (or one of them, by name) as the custom objects API names them. */
export function operationApiRef(namespace: string): OperationsRef;
export function operationApiRef(namespace: string, name: string): OperationsRef & { name: string };
export function operationApiRef(namespace: string, name?: string) {
  return {
    group: GROUP,
    version: VERSION,
    plural: OPERATION_PLURAL,
    namespace,
    ...(name !== undefined && { name }),
  };
}

/** The work-queue key of an operation. */
export function operationKey(namespace: string, name: string): string {
  return `vmop:${namespace}/${name}`;
}

export function parseOperationKey(key: string): { namespace: string; name: string } {
  const match = /^vmop:([^/]+)\/(.+)$/.exec(key);
  if (!match) throw new Error(`not a VirtualMachineOperation key: ${key}`);
  return { namespace: match[1]!, name: match[2]! };
}
