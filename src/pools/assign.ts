// Assigns a pool's VM to a user (VM-Operator's AssignVm): the user's VM of the pool if they have
// one, else a free one (assignment.ts), written to its status guarded by its resourceVersion, and
// started. Called by the web GUI for the person logged in.
import type { KubernetesObject } from '@kubernetes/client-node';
import { GROUP, PLURAL, VERSION, VirtualMachine, type Assignment } from '../api/virtual-machine.js';
import { VmPool, poolApiRef } from '../api/vm-pool.js';
import { isConflict, isNotFound, type KubeClients } from '../kube/clients.js';
import { mergePatch } from '../kube/merge-patch.js';
import { eventObjectOf, type EventRecorder } from '../reconcilers/events.js';
import { vmApiRef } from '../reconcilers/virtual-machine/naming.js';
import { assignedTo, chooseVm } from './assignment.js';
import type { PoolLock } from './pool-lock.js';

export interface AssignRequest {
  namespace: string;
  pool: string;
  user: string;
}

export type AssignOutcome =
  | { vm: string; assignedNow: boolean; started: boolean }
  | { vm?: undefined; reason: 'NoSuchPool' | 'NoFreeVm'; message: string };

export interface AssignDeps {
  clients: KubeClients;
  lock: PoolLock;
  recordEvent: EventRecorder;
  now?: () => Date;
}

/** Tries again after losing a VM to another writer (a status change between the read and the write). */
const ATTEMPTS = 5;

export async function assignFromPool(deps: AssignDeps, request: AssignRequest): Promise<AssignOutcome> {
  const { namespace, pool: poolName, user } = request;
  return deps.lock.withLock(`pool:${namespace}/${poolName}`, async () => {
    for (let attempt = 1; ; attempt++) {
      const pools = await listPools(deps.clients, namespace);
      const pool = pools.get(poolName);
      if (!pool) return { reason: 'NoSuchPool', message: `there is no pool ${poolName} in ${namespace}` };
      const vms = await listVms(deps.clients, namespace);
      const now = deps.now?.() ?? new Date();
      const held = assignedTo(vms, poolName, user);
      if (held)
        return {
          vm: held.metadata.name,
          assignedNow: false,
          started: await start(deps, held, user, poolName),
        };
      const chosen = chooseVm(vms, pool, (name) => pools.get(name), now);
      if (!chosen)
        return { reason: 'NoFreeVm', message: `every VM of pool ${poolName} is in use; try again later` };
      const assignment: Assignment = { pool: poolName, user, lastUsed: now.toISOString() };
      try {
        await deps.clients.customObjects.patchNamespacedCustomObjectStatus(
          {
            ...vmApiRef(namespace, chosen.metadata.name),
            body: { metadata: { resourceVersion: chosen.metadata.resourceVersion }, status: { assignment } },
          },
          mergePatch,
        );
      } catch (err) {
        if (isConflict(err) && attempt < ATTEMPTS) continue;
        throw err;
      }
      await deps.recordEvent(eventObjectOf(chosen), {
        type: 'Normal',
        reason: 'Assigned',
        message: `assigned to ${user} from pool ${poolName}`,
      });
      if (pool.spec.loginOnAssignment) await logIn(deps, chosen, user);
      return {
        vm: chosen.metadata.name,
        assignedNow: true,
        started: await start(deps, chosen, user, poolName),
      };
    }
  });
}

/** The pool's loginOnAssignment: the guest's vmop agent logs the user in (spec.vm.display.loggedInUser). */
async function logIn(deps: AssignDeps, vm: VirtualMachine, user: string): Promise<void> {
  if (vm.spec.vm.display.loggedInUser === user) return;
  await deps.clients.customObjects.patchNamespacedCustomObject(
    {
      ...vmApiRef(vm.metadata.namespace!, vm.metadata.name),
      body: { spec: { vm: { display: { loggedInUser: user } } } },
    },
    mergePatch,
  );
}

/** Starts the VM unless it is to run already: a user who gets a VM wants to use it. */
async function start(deps: AssignDeps, vm: VirtualMachine, user: string, pool: string): Promise<boolean> {
  if (vm.spec.vm.state === 'Running') return false;
  await deps.clients.customObjects.patchNamespacedCustomObject(
    { ...vmApiRef(vm.metadata.namespace!, vm.metadata.name), body: { spec: { vm: { state: 'Running' } } } },
    mergePatch,
  );
  await deps.recordEvent(eventObjectOf(vm), {
    type: 'Normal',
    reason: 'StartedForUser',
    message: `started for ${user}, who has it from pool ${pool}`,
  });
  return true;
}

async function listVms(clients: KubeClients, namespace: string): Promise<VirtualMachine[]> {
  const list = (
    await clients.customObjects.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      plural: PLURAL,
      namespace,
    })
  ).items as KubernetesObject[];
  return list.flatMap((item) => VirtualMachine.safeParse(item).data ?? []);
}

async function listPools(clients: KubeClients, namespace: string): Promise<Map<string, VmPool>> {
  try {
    const list = (await clients.customObjects.listNamespacedCustomObject(poolApiRef(namespace)))
      .items as KubernetesObject[];
    const pools = list.flatMap((item) => VmPool.safeParse(item).data ?? []);
    return new Map(pools.map((pool) => [pool.metadata.name, pool]));
  } catch (err) {
    if (isNotFound(err)) return new Map();
    throw err;
  }
}
