// The VirtualMachineSnapshot custom resource (short name vmsnapshot): a VM's disks, its runner data
// (TPM state, UEFI variables) and its spec as they were at one instant, kept in claims of the
// snapshot's own (KubeVirt's VirtualMachineSnapshot and Deckhouse's vmsnapshot are the anchors).
// It does not belong to the VM: deleting the VM keeps its snapshots, deleting a snapshot its copies.
import { z } from 'zod';
import { SnapshotCopyTarget } from './snapshot-copy.js';
import { Condition, GROUP, ObjectMeta, VERSION } from './virtual-machine.js';

export const SNAPSHOT_KIND = 'VirtualMachineSnapshot';
export const SNAPSHOT_PLURAL = 'virtualmachinesnapshots';
export const SNAPSHOT_SINGULAR = 'virtualmachinesnapshot';
export const SNAPSHOT_SHORT_NAME = 'vmsnapshot';

export const SnapshotSpec = z
  .object({
    virtualMachineName: z.string().min(1).max(253).describe('The VM (in the same namespace) to snapshot.'),
    requiredConsistency: z
      .boolean()
      .default(true)
      .describe(
        'Refuse a snapshot that would only be crash-consistent (a running guest that cannot be frozen); true when absent.',
      ),
  })
  .meta({
    'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'the spec of a snapshot is immutable' }],
  });

export const SnapshotPhase = z.enum(['Pending', 'InProgress', 'Ready', 'Failed']);
/** Stopped: the VM did not run; FileSystem: its guest was frozen; Crash: as after a power cut. */
export const SnapshotConsistency = z.enum(['Stopped', 'FileSystem', 'Crash']);

export const SnapshotVolume = z.object({
  /** The VM's volume: `runner-data` or a disk's `<name>-disk`. */
  name: z.string(),
  /** The VM's claim that was copied. */
  claimName: z.string(),
  /** The snapshot's claim that holds the copy. */
  copyClaimName: z.string(),
  /** The copy's size (the source claim's capacity). */
  size: z.string().optional(),
  volumeMode: z.enum(['Block', 'Filesystem']),
  storageClassName: z.string().optional(),
  phase: z.enum(['Copying', 'Ready', 'Failed']).optional(),
  message: z.string().optional(),
});

/** A provisioning Secret the VM's spec names, and the snapshot's copy of it. */
export const SnapshotSecret = z.object({
  /** Where the spec names it. */
  field: z.enum(['cloudInit', 'sysprep']),
  /** The VM's Secret (spec.<field>.secretRef.name). */
  name: z.string(),
  /** The snapshot's copy (owned by it). */
  copyName: z.string(),
});

/** A running VM's snapshot: its disks copied by its runner's QEMU into the snapshot's export pods. */
export const SnapshotRunnerCopy = z.object({
  /** The runner pod that runs the VM at the cut; the copy fails if another takes over. */
  pod: z.string(),
  podUid: z.string(),
  /** The runner's run (status.runner.runId of the VM): a restarted runner has lost the copy. */
  runId: z.string().optional(),
  /** The export pods' addresses, once every one serves: what the runner copies into. */
  targets: z.array(SnapshotCopyTarget).optional(),
  /** How long the guest's file systems were frozen, in milliseconds. */
  frozenMs: z.number().optional(),
});

const FreeForm = z.record(z.string(), z.unknown()).meta({ 'x-kubernetes-preserve-unknown-fields': true });

export const SnapshotStatus = z.object({
  phase: SnapshotPhase.optional(),
  consistency: SnapshotConsistency.optional(),
  /** The instant the snapshot shows: the VM's disks as they were then. */
  cutAt: z.string().optional(),
  readyAt: z.string().optional(),
  volumes: z.array(SnapshotVolume).optional(),
  /** Set when the VM ran at the cut: who copies its disks, and where to. */
  runner: SnapshotRunnerCopy.optional(),
  /** All volumes' sizes added up, e.g. "2Gi" or "2148532224". */
  size: z.string().optional(),
  /** The VM as it was: its spec, labels and annotations, and the address it had. */
  virtualMachine: z
    .object({
      uid: z.string().optional(),
      labels: z.record(z.string(), z.string()).optional(),
      annotations: z.record(z.string(), z.string()).optional(),
      spec: FreeForm.optional(),
      ipAddress: z.string().optional(),
      /** Its cloud-init and sysprep Secrets, copied at the cut (passwords and keys stay in Secrets). */
      secrets: z.array(SnapshotSecret).optional(),
    })
    .optional(),
  message: z.string().optional(),
  observedGeneration: z.number().int().optional(),
  conditions: z.array(Condition).optional(),
});

export const VirtualMachineSnapshot = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(SNAPSHOT_KIND),
  metadata: ObjectMeta.extend({ creationTimestamp: z.union([z.string(), z.date()]).optional() }),
  spec: SnapshotSpec,
  status: SnapshotStatus.optional(),
});

export type VirtualMachineSnapshot = z.infer<typeof VirtualMachineSnapshot>;
export type SnapshotStatus = z.infer<typeof SnapshotStatus>;
export type SnapshotVolume = z.infer<typeof SnapshotVolume>;
export type SnapshotSecret = z.infer<typeof SnapshotSecret>;
export type SnapshotRunnerCopy = z.infer<typeof SnapshotRunnerCopy>;

/** The Secret that holds a snapshot's (or a clone's VM's) copy of a provisioning Secret. */
export const provisioningSecretName = (owner: string, field: SnapshotSecret['field']) =>
  `${owner}-${field === 'cloudInit' ? 'cloud-init' : 'sysprep'}`;

/** The provisioning Secrets a VM's spec names. */
export function provisioningSecrets(spec: {
  cloudInit?: { secretRef?: { name: string } };
  sysprep?: { secretRef: { name: string } };
}): Array<{ field: SnapshotSecret['field']; name: string }> {
  return [
    ...(spec.cloudInit?.secretRef
      ? [{ field: 'cloudInit' as const, name: spec.cloudInit.secretRef.name }]
      : []),
    ...(spec.sysprep ? [{ field: 'sysprep' as const, name: spec.sysprep.secretRef.name }] : []),
  ];
}

/** The work-queue key of a snapshot. */
export const snapshotKey = (namespace: string, name: string) => `vmsnapshot:${namespace}/${name}`;
export function parseSnapshotKey(key: string): { namespace: string; name: string } {
  const match = /^vmsnapshot:([^/]+)\/(.+)$/.exec(key);
  if (!match) throw new Error(`not a VirtualMachineSnapshot key: ${key}`);
  return { namespace: match[1]!, name: match[2]! };
}

/** The claim that holds a snapshot's copy of a volume. */
export const snapshotClaimName = (snapshot: string, volume: string) => `${snapshot}-${volume}`;

/** Phases after which a snapshot changes no more. */
export const isSnapshotDone = (snapshot: { status?: { phase?: string } }) =>
  snapshot.status?.phase === 'Ready' || snapshot.status?.phase === 'Failed';
