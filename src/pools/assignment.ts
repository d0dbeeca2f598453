// Which VM of a pool a user gets, and how long an assignment holds: VM-Operator's rules (its
// Controller#onAssignVm and VmPool#isAssignable). Pure: callers read the VMs and pools.
import type { Assignment, VirtualMachine, VirtualMachineStatus } from '../api/virtual-machine.js';
import type { VmPool } from '../api/vm-pool.js';
import { retainedUntil } from './retention.js';

/** Someone's console is open on the VM (the runner reports its SPICE client). */
export const consoleInUse = (vm: Pick<VirtualMachine, 'status'>) => !!vm.status?.consoleClient;

/** The VM of `pool` assigned to `user`, if any. */
export function assignedTo(vms: VirtualMachine[], pool: string, user: string): VirtualMachine | undefined {
  return vms.find(
    (vm) =>
      vm.status?.assignment?.pool === pool &&
      vm.status.assignment.user === user &&
      !vm.metadata.deletionTimestamp,
  );
}

/** Whether an assignment still holds at `now` under its pool's retention (absent pool: no). */
export function assignmentHolds(
  vm: Pick<VirtualMachine, 'status'>,
  pool: Pick<VmPool, 'spec'> | undefined,
  now: Date,
): boolean {
  const assignment = vm.status?.assignment;
  if (!assignment) return false;
  if (!pool) return false;
  if (consoleInUse(vm)) return true;
  return now < retainedUntil(pool.spec.retention, new Date(assignment.lastUsed));
}

/**
 * The VM `pool` gives to a user who has none of it: a member not in use (no console open, no
 * assignment that still holds), least recently used first, a running one before a stopped one,
 * then by name (so two replicas choose alike). `pools` looks up the pool of an existing assignment.
 */
export function chooseVm(
  vms: VirtualMachine[],
  pool: VmPool,
  pools: (name: string) => VmPool | undefined,
  now: Date,
): VirtualMachine | undefined {
  const name = pool.metadata.name;
  const lastUsed = (vm: VirtualMachine) =>
    vm.status?.assignment ? new Date(vm.status.assignment.lastUsed).getTime() : 0;
  const running = (vm: VirtualMachine) => (vm.status?.phase === 'Running' ? 0 : 1);
  return vms
    .filter(
      (vm) =>
        vm.spec.pools.includes(name) &&
        !vm.metadata.deletionTimestamp &&
        !consoleInUse(vm) &&
        !(vm.status?.assignment && assignmentHolds(vm, pools(vm.status.assignment.pool), now)),
    )
    .sort(
      (a, b) =>
        lastUsed(a) - lastUsed(b) ||
        running(a) - running(b) ||
        a.metadata.name.localeCompare(b.metadata.name),
    )[0];
}

export interface HeldAssignment {
  /** The assignment the VM's status keeps (none when released). */
  assignment?: Assignment;
  /** Why it was released now, for the Event. */
  released?: string;
  /** When to look again: the retention ends then. */
  recheckInMs?: number;
}

/**
 * What becomes of a VM's assignment (VM reconcile): released when its pool is gone, the VM left the
 * pool, or the retention passed since it was last used; lastUsed moves when a console opens or closes.
 */
export function heldAssignment(
  vm: VirtualMachine,
  pool: VmPool | undefined,
  consoleNow: boolean,
  now: Date,
): HeldAssignment {
  const previous = vm.status?.assignment;
  if (!previous) return {};
  if (!pool) return { released: `its pool ${previous.pool} is gone` };
  if (!vm.spec.pools.includes(previous.pool)) return { released: `the VM left pool ${previous.pool}` };
  const consoleChanged = consoleNow !== consoleInUse(vm);
  const assignment = consoleChanged ? { ...previous, lastUsed: now.toISOString() } : previous;
  if (consoleNow) return { assignment };
  const until = retainedUntil(pool.spec.retention, new Date(assignment.lastUsed));
  if (now >= until)
    return {
      released: `${previous.user} did not use it for the retention of pool ${previous.pool} (${pool.spec.retention})`,
    };
  return { assignment, recheckInMs: until.getTime() - now.getTime() };
}

/** `status` with `assignment` as the VM's (none: without one). */
export function withAssignment(
  status: VirtualMachineStatus,
  assignment: Assignment | undefined,
): VirtualMachineStatus {
  const { assignment: _previous, ...rest } = status;
  return { ...rest, ...(assignment && { assignment }) };
}
