import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { VirtualMachineSnapshot } from '../../../src/api/virtual-machine-snapshot.js';
import {
  VirtualMachineSnapshotSchedule,
  type ScheduleStatus,
} from '../../../src/api/virtual-machine-snapshot-schedule.js';
import { matchesLabelSelector } from '../../../src/kube/label-selector.js';
import {
  planSchedule,
  scheduledSnapshotName,
} from '../../../src/reconcilers/virtual-machine-snapshot-schedule/plan.js';
import {
  LABEL_SCHEDULE,
  SCHEDULED_AT_ANNOTATION,
  SCHEDULE_GENERATION_ANNOTATION,
} from '../../../src/reconcilers/virtual-machine/naming.js';

const CREATED = '2026-11-29T01:30:00Z';

const schedule = (spec: object = {}, status?: ScheduleStatus, generation = 1) =>
  VirtualMachineSnapshotSchedule.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineSnapshotSchedule',
    metadata: { name: 'nightly', namespace: 'ns', generation, creationTimestamp: CREATED },
    spec: { schedule: '0 3 * * *', keep: 2, selector: { matchLabels: { backup: 'yes' } }, ...spec },
    ...(status && { status }),
  });

const vm = (name: string, labels: Record<string, string> = { backup: 'yes' }) =>
  VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name, namespace: 'ns', labels },
    spec: { vm: {} },
  });

const snapshot = (vmName: string, at: string, phase?: string, generation = 1) =>
  VirtualMachineSnapshot.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineSnapshot',
    metadata: {
      name: scheduledSnapshotName('nightly', vmName, new Date(at)),
      namespace: 'ns',
      labels: { [LABEL_SCHEDULE]: 'nightly' },
      annotations: { [SCHEDULED_AT_ANNOTATION]: at, [SCHEDULE_GENERATION_ANNOTATION]: String(generation) },
    },
    spec: { virtualMachineName: vmName },
    ...(phase && {
      status: {
        phase,
        ...(phase === 'Ready' && { readyAt: at }),
        ...(phase === 'Failed' && { message: 'disk full' }),
      },
    }),
  });

const day = (n: number) => `2026-12-0${n}T03:00:00.000Z`;

describe('a snapshot schedule', () => {
  it('takes nothing before its first run, and comes back at it', () => {
    const plan = planSchedule({
      schedule: schedule(),
      vms: [vm('web')],
      snapshots: [],
      now: new Date('2026-11-29T02:00:00Z'),
    });
    expect(plan.create).toEqual([]);
    expect(plan.status.nextScheduleTime).toBe('2026-11-29T03:00:00.000Z');
    expect(plan.requeueAfter).toBe(60 * 60 * 1000);
    expect(plan.status.conditions).toMatchObject([{ type: 'Ready', status: 'True', reason: 'Scheduled' }]);
  });

  it('at a run snapshots each VM the selector picks, named after the run, and says so', () => {
    const plan = planSchedule({
      schedule: schedule(),
      vms: [vm('web'), vm('db'), vm('scratch', {})],
      snapshots: [],
      now: new Date('2026-11-29T03:00:07Z'),
    });
    expect(plan.create.map((s) => [s.metadata.name, s.spec.virtualMachineName])).toEqual([
      ['db-nightly-20261129030000', 'db'],
      ['web-nightly-20261129030000', 'web'],
    ]);
    expect(plan.create[0]).toMatchObject({
      metadata: {
        labels: { [LABEL_SCHEDULE]: 'nightly' },
        annotations: {
          [SCHEDULED_AT_ANNOTATION]: '2026-11-29T03:00:00.000Z',
          [SCHEDULE_GENERATION_ANNOTATION]: '1',
        },
      },
      spec: { requiredConsistency: true },
    });
    expect(plan.status).toMatchObject({
      lastScheduleTime: '2026-11-29T03:00:00.000Z',
      nextScheduleTime: '2026-11-30T03:00:00.000Z',
      virtualMachines: [
        { name: 'db', lastSnapshot: 'db-nightly-20261129030000', lastSnapshotPhase: 'Pending' },
        { name: 'web', lastSnapshot: 'web-nightly-20261129030000', lastSnapshotPhase: 'Pending' },
      ],
    });
    expect(plan.events).toMatchObject([{ type: 'Normal', reason: 'SnapshotsTaken' }]);
  });

  it('takes one snapshot for runs it missed, not one per run; none twice for the same run', () => {
    const missed = planSchedule({
      schedule: schedule({}, { lastScheduleTime: day(1) }),
      vms: [vm('web')],
      snapshots: [snapshot('web', day(1), 'Ready')],
      now: new Date('2026-12-04T10:00:00Z'),
    });
    expect(missed.create.map((s) => s.metadata.annotations?.[SCHEDULED_AT_ANNOTATION])).toEqual([day(4)]);
    const again = planSchedule({
      schedule: schedule({}, missed.status),
      vms: [vm('web')],
      snapshots: [snapshot('web', day(1), 'Ready'), snapshot('web', day(4))],
      now: new Date('2026-12-04T10:00:05Z'),
    });
    expect(again.create).toEqual([]);
  });

  it('keeps the newest `keep` Ready snapshots per VM and deletes older ones and failures before them', () => {
    const plan = planSchedule({
      schedule: schedule({}, { lastScheduleTime: day(4) }),
      vms: [vm('web')],
      snapshots: [
        snapshot('web', day(1), 'Ready'),
        snapshot('web', day(2), 'Failed'),
        snapshot('web', day(3), 'Ready'),
        snapshot('web', day(4), 'Ready'),
      ],
      now: new Date('2026-12-04T05:00:00Z'),
    });
    expect(plan.delete).toEqual([
      scheduledSnapshotName('nightly', 'web', new Date(day(1))),
      scheduledSnapshotName('nightly', 'web', new Date(day(2))),
    ]);
    expect(plan.status.virtualMachines).toEqual([
      expect.objectContaining({ name: 'web', readySnapshots: 2, consecutiveFailures: 0 }),
    ]);
    expect(plan.status.lastSuccessfulTime).toBe(day(4));
    expect(plan.events).toMatchObject([{ reason: 'SnapshotsDeleted' }]);
  });

  it('gives a VM whose last snapshot is not done (a running VM waits for its stop) no second one', () => {
    const plan = planSchedule({
      schedule: schedule({}, { lastScheduleTime: day(1) }),
      vms: [vm('web'), vm('db')],
      snapshots: [snapshot('web', day(1), 'Pending'), snapshot('db', day(1), 'Ready')],
      now: new Date('2026-12-02T03:00:01Z'),
    });
    expect(plan.create.map((s) => s.spec.virtualMachineName)).toEqual(['db']);
    expect(plan.status.message).toContain(
      `waiting for earlier snapshots: web (${scheduledSnapshotName('nightly', 'web', new Date(day(1)))} Pending)`,
    );
  });

  it('after maxFailures failed snapshots of a VM in a row takes no more of it until the spec changes', () => {
    const failing = [snapshot('web', day(1), 'Failed'), snapshot('web', day(2), 'Failed')];
    const before: ScheduleStatus = {
      lastScheduleTime: day(2),
      virtualMachines: [
        {
          name: 'web',
          lastSnapshot: scheduledSnapshotName('nightly', 'web', new Date(day(2))),
          lastSnapshotPhase: 'InProgress',
          consecutiveFailures: 1,
        },
      ],
    };
    const stopped = planSchedule({
      schedule: schedule({ maxFailures: 2 }, before),
      vms: [vm('web'), vm('db')],
      snapshots: failing,
      now: new Date('2026-12-03T03:00:01Z'),
    });
    expect(stopped.create.map((s) => s.spec.virtualMachineName)).toEqual(['db']);
    expect(stopped.status).toMatchObject({
      consecutiveFailures: 2,
      conditions: [{ type: 'Ready', status: 'False', reason: 'TooManyFailures' }],
    });
    expect(stopped.events.map((e) => [e.type, e.reason])).toEqual([
      ['Warning', 'SnapshotFailed'],
      ['Normal', 'SnapshotsTaken'],
      ['Warning', 'TooManyFailures'],
    ]);
    expect(stopped.events[0]!.message).toContain('disk full');

    const changed = planSchedule({
      schedule: schedule({ maxFailures: 2, keep: 3 }, stopped.status, 2),
      vms: [vm('web')],
      snapshots: failing,
      now: new Date('2026-12-04T03:00:01Z'),
    });
    expect(changed.create.map((s) => s.spec.virtualMachineName)).toEqual(['web']);
    expect(changed.status.consecutiveFailures).toBe(0);
  });

  it('takes nothing while suspended; an invalid schedule or time zone is said in status, once in an Event', () => {
    const suspended = planSchedule({
      schedule: schedule({ suspend: true }),
      vms: [vm('web')],
      snapshots: [],
      now: new Date('2026-12-04T03:00:01Z'),
    });
    expect(suspended.create).toEqual([]);
    expect(suspended.requeueAfter).toBeUndefined();
    expect(suspended.status.conditions).toMatchObject([{ status: 'False', reason: 'Suspended' }]);

    const invalid = planSchedule({
      schedule: schedule({ schedule: '0 25 * * *' }),
      vms: [vm('web')],
      snapshots: [],
      now: new Date(),
    });
    expect(invalid.create).toEqual([]);
    expect(invalid.status.conditions).toMatchObject([{ status: 'False', reason: 'InvalidSchedule' }]);
    expect(invalid.status.message).toMatch(/spec.schedule \(0 25 \* \* \*\) is no schedule: .*hour/);
    expect(invalid.events).toMatchObject([{ type: 'Warning', reason: 'InvalidSchedule' }]);
    const unchanged = planSchedule({
      schedule: schedule({ schedule: '0 25 * * *' }, invalid.status),
      vms: [],
      snapshots: [],
      now: new Date(),
    });
    expect(unchanged.events).toEqual([]);

    const zone = planSchedule({
      schedule: schedule({ timeZone: 'Mars/Olympus' }),
      vms: [],
      snapshots: [],
      now: new Date(),
    });
    expect(zone.status.message).toContain('in Mars/Olympus) is no schedule');
  });

  it('reads the schedule in its time zone, and takes seconds as a sixth field', () => {
    const berlin = planSchedule({
      schedule: schedule({ timeZone: 'Europe/Berlin' }),
      vms: [],
      snapshots: [],
      now: new Date('2026-11-29T01:00:00Z'),
    });
    expect(berlin.status.nextScheduleTime).toBe('2026-11-29T02:00:00.000Z'); // 03:00 CET
    const often = planSchedule({
      schedule: schedule({ schedule: '*/20 * * * * *' }),
      vms: [],
      snapshots: [],
      now: new Date('2026-11-29T01:30:05Z'),
    });
    expect(often.status.nextScheduleTime).toBe('2026-11-29T01:30:20.000Z');
  });

  it('names snapshots within 52 characters, long names cut with a hash so they stay apart', () => {
    const at = new Date('2026-11-29T03:00:00Z');
    const long = 'a'.repeat(40);
    const one = scheduledSnapshotName('nightly', `${long}-one`, at);
    const two = scheduledSnapshotName('nightly', `${long}-two`, at);
    expect(one.length).toBeLessThanOrEqual(52);
    expect(one).not.toBe(two);
    expect(one).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  });
});

describe('a label selector', () => {
  it('matches as the apiserver does', () => {
    const labels = { tier: 'web', env: 'prod' };
    expect(matchesLabelSelector({}, labels)).toBe(true);
    expect(matchesLabelSelector({ matchLabels: { tier: 'web' } }, labels)).toBe(true);
    expect(matchesLabelSelector({ matchLabels: { tier: 'db' } }, labels)).toBe(false);
    expect(
      matchesLabelSelector(
        { matchExpressions: [{ key: 'env', operator: 'In', values: ['prod', 'qa'] }] },
        labels,
      ),
    ).toBe(true);
    expect(
      matchesLabelSelector(
        { matchExpressions: [{ key: 'env', operator: 'NotIn', values: ['prod'] }] },
        labels,
      ),
    ).toBe(false);
    expect(
      matchesLabelSelector({ matchExpressions: [{ key: 'gpu', operator: 'NotIn', values: ['a'] }] }, labels),
    ).toBe(true);
    expect(matchesLabelSelector({ matchExpressions: [{ key: 'gpu', operator: 'Exists' }] }, labels)).toBe(
      false,
    );
    expect(
      matchesLabelSelector({ matchExpressions: [{ key: 'gpu', operator: 'DoesNotExist' }] }, labels),
    ).toBe(true);
    expect(
      matchesLabelSelector({ matchExpressions: [{ key: 'env', operator: 'In', values: ['qa'] }] }, undefined),
    ).toBe(false);
  });
});
