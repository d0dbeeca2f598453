// The VirtualMachineSnapshotSchedule custom resource (short name vmsnapshotschedule): snapshots of
// the VMs a label selector picks, taken on a cron schedule and kept up to a number per VM
// (Harvester's ScheduleVMBackup is the anchor: cron, retain, maxFailure). Its snapshots are
// VirtualMachineSnapshots like any other, labelled with the schedule; they do not belong to it, so
// deleting a schedule keeps what it took.
import { Cron } from 'croner';
import { z } from 'zod';
import { StringMap } from './kubernetes-types.js';
import { Condition, GROUP, ObjectMeta, VERSION } from './virtual-machine.js';

export const SCHEDULE_KIND = 'VirtualMachineSnapshotSchedule';
export const SCHEDULE_PLURAL = 'virtualmachinesnapshotschedules';
export const SCHEDULE_SINGULAR = 'virtualmachinesnapshotschedule';
export const SCHEDULE_SHORT_NAME = 'vmsnapshotschedule';

/** The cron expression as croner reads it: 5 fields (a minute's precision) or 6 (seconds first). */
export function parseCron(expression: string, timeZone?: string): Cron {
  return new Cron(expression, {
    paused: true,
    mode: '5-or-6-parts',
    ...(timeZone && { timezone: timeZone }),
  });
}

/** Why an expression (or time zone) is no schedule, or undefined when it is one. */
export function cronError(expression: string, timeZone?: string): string | undefined {
  try {
    parseCron(expression, timeZone).nextRun();
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

/** A label selector whose operators the CRD checks (an unknown one would match nothing, silently). */
const VmSelector = z.object({
  matchLabels: StringMap.optional(),
  matchExpressions: z
    .array(
      z.object({
        key: z.string().min(1),
        operator: z.enum(['In', 'NotIn', 'Exists', 'DoesNotExist']),
        values: z.array(z.string()).optional(),
      }),
    )
    .optional(),
});

export const ScheduleSpec = z.object({
  schedule: z
    .string()
    .min(1)
    .max(200)
    .describe(
      'When to take snapshots, as cron does ("0 3 * * *": 03:00 each day; @hourly, @daily); a sixth field in front gives seconds.',
    ),
  timeZone: z
    .string()
    .max(100)
    .optional()
    .describe('The IANA time zone the schedule is read in (e.g. Europe/Berlin); UTC when absent.'),
  selector: VmSelector.default({}).describe(
    "The VMs (in the schedule's namespace) to snapshot, by their labels; every VM of the namespace when empty.",
  ),
  keep: z
    .number()
    .int()
    .min(1)
    .max(1000)
    .describe('How many of its Ready snapshots the schedule keeps per VM: older ones are deleted.'),
  maxFailures: z
    .number()
    .int()
    .min(1)
    .default(3)
    .describe(
      'After this many failed snapshots in a row the schedule takes no more until its spec changes; 3 when absent.',
    ),
  suspend: z.boolean().default(false).describe('Take no snapshots while true (the kept ones stay).'),
  requiredConsistency: z
    .boolean()
    .default(true)
    .describe("The snapshots' requiredConsistency: refuse ones that would only be crash-consistent."),
});

export const ScheduledVm = z.object({
  name: z.string(),
  /** The newest snapshot the schedule took of the VM. */
  lastSnapshot: z.string().optional(),
  lastSnapshotPhase: z.string().optional(),
  /** Its Ready snapshots that are kept. */
  readySnapshots: z.number().int().optional(),
  /** Its newest snapshots of the current spec that failed in a row. */
  consecutiveFailures: z.number().int().optional(),
});

export const ScheduleStatus = z.object({
  /** The scheduled time of the last run (each selected VM's snapshot made then). */
  lastScheduleTime: z.string().optional(),
  nextScheduleTime: z.string().optional(),
  /** When the last snapshot of the schedule became Ready. */
  lastSuccessfulTime: z.string().optional(),
  /** The most snapshots of one VM that failed in a row. */
  consecutiveFailures: z.number().int().optional(),
  virtualMachines: z.array(ScheduledVm).optional(),
  message: z.string().optional(),
  observedGeneration: z.number().int().optional(),
  conditions: z.array(Condition).optional(),
});

export const VirtualMachineSnapshotSchedule = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(SCHEDULE_KIND),
  metadata: ObjectMeta.extend({ creationTimestamp: z.union([z.string(), z.date()]).optional() }),
  spec: ScheduleSpec,
  status: ScheduleStatus.optional(),
});

export type VirtualMachineSnapshotSchedule = z.infer<typeof VirtualMachineSnapshotSchedule>;
export type ScheduleStatus = z.infer<typeof ScheduleStatus>;
export type ScheduledVm = z.infer<typeof ScheduledVm>;

/** The work-queue key of a schedule. */
export const scheduleKey = (namespace: string, name: string) => `vmsnapshotschedule:${namespace}/${name}`;
export function parseScheduleKey(key: string): { namespace: string; name: string } {
  const match = /^vmsnapshotschedule:([^/]+)\/(.+)$/.exec(key);
  if (!match) throw new Error(`not a VirtualMachineSnapshotSchedule key: ${key}`);
  return { namespace: match[1]!, name: match[2]! };
}
