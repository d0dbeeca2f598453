// What the GUI API's routers share: their dependencies, the person's session, refusals, the VM a
// person may see or act on, and the Event that names who asked for a change.
import type { KubeConfig } from '@kubernetes/client-node';
import type { CookieOptions, Response } from 'express';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import type { KubeClients } from '../../kube/clients.js';
import type { PoolLock } from '../../pools/pool-lock.js';
import { eventObjectOf, type EventRecorder } from '../../reconcilers/events.js';
import type { Access } from '../access.js';
import type { Consoles } from '../consoles.js';
import type { LiveViews } from '../live.js';
import type { Action } from '../permissions.js';
import type { Session } from '../sessions.js';
import type { UsageHistory } from '../usage.js';
import type { UsagePoint } from '../vm-details.js';

export const REQUESTED_BY_ANNOTATION = 'vmoperator.jdrupes.org/requested-by';

export interface ApiDeps {
  clients: KubeClients;
  /** The manager's own, for port-forwards to pods (an upload's importer). */
  kubeConfig: KubeConfig;
  access: Access;
  live: LiveViews;
  lock: PoolLock;
  recordEvent: EventRecorder;
  consoles: Consoles;
  /** The session cookie's flags (Secure, HttpOnly, SameSite), for the console ticket's too. */
  cookieOptions: CookieOptions;
  usage: UsageHistory;
  /** The last hour of a VM's use, as its runner recorded it. */
  vmUsage: (namespace: string, name: string) => Promise<UsagePoint[]>;
  /** The cluster's namespaces (the New VM form offers those the person may create VMs in). */
  namespaces: () => Promise<string[]>;
  /** Whether the session still exists (a logout elsewhere ends the page's event stream). */
  sessionAlive: (id: string) => Promise<boolean>;
}

export const sessionOf = (res: Response) => res.locals.session as Session;
export const refuse = (res: Response, status: number, message: string) =>
  void res.status(status).json({ message });

/** The VM, if the person may see it; refused with 404 (saying nothing more) when not. */
export async function visibleVm(
  access: Access,
  res: Response,
  namespace: string,
  name: string,
): Promise<VirtualMachine | undefined> {
  const vm = access.vm(namespace, name);
  if (!vm || !(await access.vmView(sessionOf(res).person, namespace, name))) {
    refuse(res, 404, `there is no VM ${name} in ${namespace} that you may see`);
    return undefined;
  }
  return vm;
}

/** The VM, if the person may see it and do `action` on it; refused (404 or 403) when not. */
export async function vmThePersonMay(
  access: Access,
  res: Response,
  namespace: string,
  name: string,
  action: Action,
  refusal = `you may not ${action} ${name}`,
): Promise<VirtualMachine | undefined> {
  const vm = await visibleVm(access, res, namespace, name);
  if (!vm) return undefined;
  if (await access.mayOnVm(sessionOf(res).person, vm, action)) return vm;
  refuse(res, 403, refusal);
  return undefined;
}

/** An Event on the VM: who asked for what in the GUI. */
export const recordRequest = (deps: ApiDeps, vm: VirtualMachine, message: string) =>
  deps.recordEvent(eventObjectOf(vm), { type: 'Normal', reason: 'RequestedInWebGui', message });
