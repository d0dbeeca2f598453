// What a person may do with a VM or pool: the union of VM-Operator's grants (spec.permissions of
// the VM, and of the pool the VM is assigned to them from) and Kubernetes RBAC for the same person
// (rbac.ts). Pure: the grants part; the GUI's actions and what each needs of either.
import type { VirtualMachine } from '../api/virtual-machine.js';
import type { VmPool } from '../api/vm-pool.js';
import type { Person } from './sessions.js';

/** What the GUI offers; VM-Operator's grants cover the first five. */
export const ACTIONS = [
  'start',
  'stop',
  'reset',
  'accessConsole',
  'takeConsole',
  'restart',
  'migrate',
  'resources',
  // Snapshots, by RBAC alone (VM-Operator's grants know none of them).
  'snapshot',
  'restore',
  'clone',
  // Deleting the VM and editing its YAML, by RBAC alone too.
  'delete',
  'edit',
] as const;
export type Action = (typeof ACTIONS)[number];

type Grant = { user?: string; role?: string; may: string[] };

/** The actions `grants` give `person` ('*': all of VM-Operator's). */
export function granted(person: Person, grants: Grant[] | undefined): Set<Action> {
  const actions = new Set<Action>();
  for (const grant of grants ?? []) {
    const applies =
      (grant.user !== undefined && grant.user === person.user) ||
      (grant.role !== undefined && person.groups.includes(grant.role));
    if (!applies) continue;
    for (const may of grant.may)
      for (const action of may === '*' ? VMO_ACTIONS : [may as Action]) actions.add(action);
  }
  // Who may take a console over may open one.
  if (actions.has('takeConsole')) actions.add('accessConsole');
  return actions;
}
const VMO_ACTIONS: Action[] = ['start', 'stop', 'reset', 'accessConsole', 'takeConsole'];

/** VM-Operator's part: the VM's grants, and its pool's while it is assigned to the person. */
export function grantedOnVm(
  person: Person,
  vm: VirtualMachine,
  pool: (name: string) => VmPool | undefined,
): Set<Action> {
  const actions = granted(person, vm.spec.permissions);
  const assignment = vm.status?.assignment;
  if (assignment?.user === person.user)
    for (const action of granted(person, pool(assignment.pool)?.spec.permissions)) actions.add(action);
  return actions;
}

/**
 * The Kubernetes request that allows an action (SubjectAccessReview's resourceAttributes, group
 * vmoperator.jdrupes.org): the operations the GUI makes, the patch it sends, and, for consoles, the
 * subresource `vms/console` (as KubeVirt's virtualmachineinstances/console).
 */
export function rbacRequestOf(action: Action | 'see'): {
  verb: string;
  resource: string;
  subresource?: string;
} {
  switch (action) {
    case 'see':
      return { verb: 'get', resource: 'vms' };
    case 'resources':
      return { verb: 'patch', resource: 'vms' };
    case 'accessConsole':
    case 'takeConsole':
      return { verb: 'get', resource: 'vms', subresource: 'console' };
    case 'snapshot':
      return { verb: 'create', resource: 'virtualmachinesnapshots' };
    case 'restore':
      return { verb: 'create', resource: 'virtualmachinerestores' };
    case 'clone':
      return { verb: 'create', resource: 'virtualmachineclones' };
    case 'delete':
      return { verb: 'delete', resource: 'vms' };
    case 'edit':
      return { verb: 'update', resource: 'vms' };
    default:
      return { verb: 'create', resource: 'virtualmachineoperations' };
  }
}
