// What a VirtualMachineSnapshotSchedule does next (pure): at each run of its cron, a snapshot of
// every VM its selector picks (one named after the run, so replicas that race make the same one);
// per VM, the newest `keep` Ready snapshots kept and older ones deleted; a VM whose last
// `maxFailures` snapshots failed is left alone until the spec changes. A VM whose last snapshot is
// not done yet (a running VM's waits for its stop) gets no second one.
import { createHash } from 'node:crypto';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import { SNAPSHOT_KIND, type VirtualMachineSnapshot } from '../../api/virtual-machine-snapshot.js';
import {
  cronError,
  parseCron,
  type ScheduleStatus,
  type ScheduledVm,
  type VirtualMachineSnapshotSchedule,
} from '../../api/virtual-machine-snapshot-schedule.js';
import { matchesLabelSelector } from '../../kube/label-selector.js';
import { nextCondition, type ConditionFacts } from '../conditions.js';
import {
  LABEL_MANAGED_BY,
  LABEL_SCHEDULE,
  MANAGED_BY,
  SCHEDULED_AT_ANNOTATION,
  SCHEDULE_GENERATION_ANNOTATION,
} from '../virtual-machine/naming.js';

/** A snapshot's name has at most 52 characters (its CRD): the VM and schedule part is cut to fit. */
const MAX_SNAPSHOT_NAME = 52;
const STAMP_LENGTH = 14; // YYYYMMDDhhmmss

/** The snapshot of `vm` for the run at `at`: readable, unique per schedule, VM and run. */
export function scheduledSnapshotName(schedule: string, vm: string, at: Date): string {
  const stamp = at.toISOString().replace(/[-:T]/g, '').slice(0, STAMP_LENGTH);
  const room = MAX_SNAPSHOT_NAME - STAMP_LENGTH - 1;
  let prefix = `${vm}-${schedule}`;
  if (prefix.length > room) {
    const hash = createHash('sha256').update(prefix).digest('hex').slice(0, 8);
    prefix = `${prefix.slice(0, room - hash.length - 1).replace(/-+$/, '')}-${hash}`;
  }
  return `${prefix}-${stamp}`;
}

export interface ScheduleInput {
  schedule: VirtualMachineSnapshotSchedule;
  /** The VMs of the schedule's namespace. */
  vms: VirtualMachine[];
  /** The snapshots the schedule took (by its label). */
  snapshots: VirtualMachineSnapshot[];
  now: Date;
}

export interface ScheduleEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface SchedulePlan {
  status: ScheduleStatus;
  create: VirtualMachineSnapshot[];
  /** Snapshots retention lets go. */
  delete: string[];
  events: ScheduleEvent[];
  /** When to look again (the next run), in ms. */
  requeueAfter?: number;
}

const scheduledAt = (snapshot: VirtualMachineSnapshot) =>
  snapshot.metadata.annotations?.[SCHEDULED_AT_ANNOTATION] ??
  String(snapshot.metadata.creationTimestamp ?? '');

/** Newest first. */
const byRunDescending = (a: VirtualMachineSnapshot, b: VirtualMachineSnapshot) =>
  Date.parse(scheduledAt(b)) - Date.parse(scheduledAt(a));

const phaseOf = (snapshot: VirtualMachineSnapshot) => snapshot.status?.phase ?? 'Pending';
const isDone = (snapshot: VirtualMachineSnapshot) => ['Ready', 'Failed'].includes(phaseOf(snapshot));

/** The VM's snapshots of the current spec that failed in a row, newest first. */
function failuresInARow(
  snapshots: VirtualMachineSnapshot[],
  generation: number | undefined,
): VirtualMachineSnapshot[] {
  const failed: VirtualMachineSnapshot[] = [];
  for (const snapshot of snapshots.filter(isDone)) {
    if (phaseOf(snapshot) !== 'Failed') break;
    if (snapshot.metadata.annotations?.[SCHEDULE_GENERATION_ANNOTATION] !== String(generation)) break;
    failed.push(snapshot);
  }
  return failed;
}

interface VmRetention {
  keep: VirtualMachineSnapshot[];
  delete: VirtualMachineSnapshot[];
}

/** The newest `keep` Ready snapshots stay, and the failures since the newest Ready one; the rest goes. */
function retain(snapshots: VirtualMachineSnapshot[], keep: number): VmRetention {
  const ready = snapshots.filter((s) => phaseOf(s) === 'Ready');
  const newestReady = ready[0] ? Date.parse(scheduledAt(ready[0])) : -Infinity;
  const goes = new Set([
    ...ready.slice(keep),
    ...snapshots.filter((s) => phaseOf(s) === 'Failed' && Date.parse(scheduledAt(s)) < newestReady),
  ]);
  return {
    keep: snapshots.filter((s) => !goes.has(s)),
    delete: snapshots.filter((s) => goes.has(s)).reverse(), // oldest first
  };
}

function snapshotFor(schedule: VirtualMachineSnapshotSchedule, vm: string, at: Date): VirtualMachineSnapshot {
  return {
    apiVersion: schedule.apiVersion,
    kind: SNAPSHOT_KIND,
    metadata: {
      name: scheduledSnapshotName(schedule.metadata.name, vm, at),
      namespace: schedule.metadata.namespace,
      labels: { [LABEL_SCHEDULE]: schedule.metadata.name, [LABEL_MANAGED_BY]: MANAGED_BY },
      annotations: {
        [SCHEDULED_AT_ANNOTATION]: at.toISOString(),
        [SCHEDULE_GENERATION_ANNOTATION]: String(schedule.metadata.generation),
      },
    },
    spec: { virtualMachineName: vm, requiredConsistency: schedule.spec.requiredConsistency },
  };
}

export function planSchedule(input: ScheduleInput): SchedulePlan {
  const { schedule, now } = input;
  const { spec, metadata } = schedule;
  const before = schedule.status ?? {};
  const condition = (facts: ConditionFacts) => [nextCondition(before.conditions, facts, now)];
  const invalid = cronError(spec.schedule, spec.timeZone);
  if (invalid !== undefined) {
    const message = `spec.schedule (${spec.schedule}${spec.timeZone ? ` in ${spec.timeZone}` : ''}) is no schedule: ${invalid}`;
    return {
      status: {
        ...before,
        message,
        observedGeneration: metadata.generation,
        conditions: condition({ type: 'Ready', status: 'False', reason: 'InvalidSchedule', message }),
      },
      create: [],
      delete: [],
      events: before.message === message ? [] : [{ type: 'Warning', reason: 'InvalidSchedule', message }],
    };
  }
  const cron = parseCron(spec.schedule, spec.timeZone);
  const events: ScheduleEvent[] = [];

  // The run that is due: the latest cron time since the last one (runs missed meanwhile are one).
  const since = new Date(before.lastScheduleTime ?? String(metadata.creationTimestamp ?? now.toISOString()));
  const latest = cron.previousRuns(1, now)[0];
  const due = !spec.suspend && latest && latest > since ? latest : undefined;

  const selected = input.vms
    .filter((vm) => !vm.metadata.deletionTimestamp && matchesLabelSelector(spec.selector, vm.metadata.labels))
    .map((vm) => vm.metadata.name)
    .sort();
  const snapshotsOf = (vm: string) =>
    input.snapshots
      .filter((s) => s.spec.virtualMachineName === vm && !s.metadata.deletionTimestamp)
      .sort(byRunDescending);
  const vmNames = [
    ...new Set([...selected, ...input.snapshots.map((s) => s.spec.virtualMachineName)]),
  ].sort();

  const create: VirtualMachineSnapshot[] = [];
  const deleted: string[] = [];
  const stoppedForFailures: string[] = [];
  const waiting: string[] = [];
  const virtualMachines = vmNames.map((vm): ScheduledVm => {
    const retention = retain(snapshotsOf(vm), spec.keep);
    deleted.push(...retention.delete.map((s) => s.metadata.name));
    let kept = retention.keep;
    const failures = failuresInARow(kept, metadata.generation);
    const beforeVm = before.virtualMachines?.find((entry) => entry.name === vm);
    const newFailure = failures[0];
    if (
      newFailure &&
      beforeVm?.lastSnapshot === newFailure.metadata.name &&
      beforeVm.lastSnapshotPhase !== 'Failed'
    )
      events.push({
        type: 'Warning',
        reason: 'SnapshotFailed',
        message: `snapshot ${newFailure.metadata.name} of VM ${vm} failed: ${newFailure.status?.message ?? 'no reason given'}`,
      });
    const tooMany = failures.length >= spec.maxFailures;
    if (tooMany) stoppedForFailures.push(vm);
    const unfinished = kept.find((s) => !isDone(s));
    if (unfinished && selected.includes(vm))
      waiting.push(`${vm} (${unfinished.metadata.name} ${phaseOf(unfinished)})`);
    if (due && selected.includes(vm) && !tooMany && !unfinished) {
      const snapshot = snapshotFor(schedule, vm, due);
      create.push(snapshot);
      kept = [snapshot, ...kept];
    }
    const last = kept[0];
    return {
      name: vm,
      ...(last && { lastSnapshot: last.metadata.name, lastSnapshotPhase: phaseOf(last) }),
      readySnapshots: kept.filter((s) => phaseOf(s) === 'Ready').length,
      consecutiveFailures: failures.length,
    };
  });

  if (create.length > 0)
    events.push({
      type: 'Normal',
      reason: 'SnapshotsTaken',
      message: `run of ${due!.toISOString()}: ${create.map((s) => `${s.metadata.name} of ${s.spec.virtualMachineName}`).join(', ')}`,
    });
  if (deleted.length > 0)
    events.push({
      type: 'Normal',
      reason: 'SnapshotsDeleted',
      message: `keeping ${spec.keep} per VM: deleted ${deleted.join(', ')}`,
    });
  const newlyStopped = stoppedForFailures.filter(
    (vm) =>
      (before.virtualMachines?.find((entry) => entry.name === vm)?.consecutiveFailures ?? 0) <
      spec.maxFailures,
  );
  if (newlyStopped.length > 0)
    events.push({
      type: 'Warning',
      reason: 'TooManyFailures',
      message: `${newlyStopped.join(', ')}: the last ${spec.maxFailures} snapshots failed; no more are taken until the schedule's spec changes`,
    });

  const next = spec.suspend ? undefined : cron.nextRun(now);
  const lastSuccessful = [...input.snapshots.map((s) => s.status?.readyAt), before.lastSuccessfulTime]
    .filter((at): at is string => at !== undefined)
    .sort()
    .pop();
  const readyCondition: ConditionFacts = spec.suspend
    ? {
        type: 'Ready',
        status: 'False',
        reason: 'Suspended',
        message: 'spec.suspend is true: no snapshots are taken',
      }
    : stoppedForFailures.length > 0
      ? {
          type: 'Ready',
          status: 'False',
          reason: 'TooManyFailures',
          message: `no snapshots of ${stoppedForFailures.join(', ')}: their last ${spec.maxFailures} failed; change the spec to try again`,
        }
      : { type: 'Ready', status: 'True', reason: 'Scheduled', message: `next run at ${next?.toISOString()}` };
  const message = [
    readyCondition.message,
    ...(waiting.length > 0 ? [`waiting for earlier snapshots: ${waiting.join(', ')}`] : []),
  ].join('; ');
  return {
    status: {
      ...(due || before.lastScheduleTime
        ? { lastScheduleTime: (due ?? new Date(before.lastScheduleTime!)).toISOString() }
        : {}),
      ...(next && { nextScheduleTime: next.toISOString() }),
      ...(lastSuccessful && { lastSuccessfulTime: lastSuccessful }),
      consecutiveFailures: Math.max(0, ...virtualMachines.map((vm) => vm.consecutiveFailures ?? 0)),
      virtualMachines,
      message,
      observedGeneration: metadata.generation,
      conditions: condition(readyCondition),
    },
    create,
    delete: deleted,
    events,
    ...(next && { requeueAfter: Math.max(0, next.getTime() - now.getTime()) }),
  };
}
