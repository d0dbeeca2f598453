// The GUI's API (JSON, under /api; the session middleware has checked the login and, for changes,
// the CSRF token). Every change goes to the apiserver as an operation or a patch by the manager,
// after checking the person may, and an Event on the VM names who asked.
import { Router, type CookieOptions, type Response } from 'express';
import { z } from 'zod';
import { Quantity } from '../api/kubernetes-types.js';
import { OPERATION_KIND, operationApiRef, type OperationType } from '../api/virtual-machine-operation.js';
import { API_VERSION, GROUP, VERSION, type VirtualMachine } from '../api/virtual-machine.js';
import { apiserverRejection, type KubeClients } from '../kube/clients.js';
import { mergePatch } from '../kube/merge-patch.js';
import { assignFromPool } from '../pools/assign.js';
import type { PoolLock } from '../pools/pool-lock.js';
import { eventObjectOf, type EventRecorder } from '../reconcilers/events.js';
import { vmApiRef } from '../reconcilers/virtual-machine/naming.js';
import type { Access } from './access.js';
import type { LiveViews } from './live.js';
import type { Action } from './permissions.js';
import type { Session } from './sessions.js';
import { TICKET_COOKIE, TICKET_SECONDS, consolePath, type Consoles } from './consoles.js';
import type { UsageHistory } from './usage.js';
import { snapshotRows, vmDetails, type UsagePoint } from './vm-details.js';
import { SNAPSHOT_KIND, SNAPSHOT_PLURAL } from '../api/virtual-machine-snapshot.js';
import { RESTORE_KIND, RESTORE_PLURAL } from '../api/virtual-machine-restore.js';
import { CLONE_KIND, CLONE_PLURAL, CloneSpec } from '../api/virtual-machine-clone.js';
import { USAGE_SAMPLE_SECONDS } from '../api/vm-usage-history.js';

export const REQUESTED_BY_ANNOTATION = 'vmoperator.jdrupes.org/requested-by';
/** Keeps proxies from closing an idle event stream. */
const HEARTBEAT_MS = 20_000;

const OPERATIONS: Record<string, { type: OperationType; action: Action }> = {
  start: { type: 'Start', action: 'start' },
  stop: { type: 'Stop', action: 'stop' },
  restart: { type: 'Restart', action: 'restart' },
  reset: { type: 'Reset', action: 'reset' },
  migrate: { type: 'Migrate', action: 'migrate' },
};

const Resources = z
  .object({ currentCpus: z.number().int().min(1).max(1024).optional(), currentRam: Quantity.optional() })
  .strict()
  .refine((r) => r.currentCpus !== undefined || r.currentRam !== undefined, 'name currentCpus or currentRam');

export interface ApiDeps {
  clients: KubeClients;
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
  /** Whether the session still exists (a logout elsewhere ends the page's event stream). */
  sessionAlive: (id: string) => Promise<boolean>;
}

const sessionOf = (res: Response) => res.locals.session as Session;
const refuse = (res: Response, status: number, message: string) => void res.status(status).json({ message });

export function apiRouter(deps: ApiDeps): Router {
  const { access, clients } = deps;
  const router = Router();

  router.get('/me', async (_req, res) => {
    const { person, csrf } = sessionOf(res);
    // Whether the All VMs page lists the cluster's VMs or only this person's (it says which).
    res.json({ ...person, csrf, seesCluster: await access.seesCluster(person) });
  });

  // The cluster's CPUs and RAM in use over 24 h: for people who may see every VM.
  router.get('/usage', async (_req, res) => {
    if (!(await access.seesCluster(sessionOf(res).person)))
      return refuse(res, 403, 'only people who may list every VM see the cluster totals');
    res.json({ sampleSeconds: deps.usage.sampleSeconds, samples: await deps.usage.read() });
  });

  // Server-sent events: the person's VMs and pools, then their changes.
  router.get('/live', async (req, res) => {
    const session = sessionOf(res);
    res.writeHead(200, {
      'Content-Type': 'text/event-stream',
      'Cache-Control': 'no-store',
      'X-Accel-Buffering': 'no',
    });
    const write = (event: string, data: unknown) =>
      res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    const { vms, pools, detach } = await deps.live.attach(session.person, (message) =>
      write(message.type, message),
    );
    write('snapshot', { vms, pools });
    const heartbeat = setInterval(async () => {
      if (!(await deps.sessionAlive(session.id).catch(() => true))) return void res.end();
      res.write(': alive\n\n');
    }, HEARTBEAT_MS);
    req.on('close', () => {
      clearInterval(heartbeat);
      detach();
    });
  });

  const visibleVm = async (
    res: Response,
    namespace: string,
    name: string,
  ): Promise<VirtualMachine | undefined> => {
    const vm = access.vm(namespace, name);
    if (!vm || !(await access.vmView(sessionOf(res).person, namespace, name))) {
      refuse(res, 404, `there is no VM ${name} in ${namespace} that you may see`);
      return undefined;
    }
    return vm;
  };

  // The VM's page: what it is, what happened to it, and what it used in the last hour.
  router.get('/vms/:namespace/:name', async (req, res) => {
    const { namespace, name } = req.params;
    const vm = access.vm(namespace, name);
    const view = vm && (await access.vmView(sessionOf(res).person, namespace, name));
    if (!vm || !view) return refuse(res, 404, `there is no VM ${name} in ${namespace} that you may see`);
    const [events, usage] = await Promise.all([
      clients.core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.uid=${vm.metadata.uid}` }),
      deps.vmUsage(namespace, name),
    ]);
    res.json({
      vm: view,
      ...vmDetails(vm, events.items),
      snapshots: snapshotRows(access.snapshotsOf(namespace, name)),
      usage: { sampleSeconds: USAGE_SAMPLE_SECONDS, points: usage },
    });
  });

  // A console ticket (and for SPICE a one-time password) for the person's page.
  router.post('/vms/:namespace/:name/console/:kind', async (req, res) => {
    const { namespace, name, kind } = req.params;
    if (kind !== 'spice' && kind !== 'serial') return refuse(res, 404, `no console ${kind}`);
    const vm = await visibleVm(res, namespace, name);
    if (!vm) return;
    const session = sessionOf(res);
    if (!(await access.mayOnVm(session.person, vm, 'accessConsole')))
      return refuse(res, 403, `you may not open the console of ${name}`);
    const open = kind === 'spice' ? deps.consoles.openSpice : deps.consoles.openSerial;
    const opened = await open(session.id, session.person, vm);
    if ('message' in opened) return refuse(res, 409, opened.message!);
    // The ticket goes only to that console's WebSocket, in a cookie: never in a URL or a script's reach.
    const path = consolePath(kind, namespace, name);
    res.cookie(TICKET_COOKIE, opened.ticket, {
      ...deps.cookieOptions,
      sameSite: 'strict',
      path,
      maxAge: TICKET_SECONDS * 1000,
    });
    res.json({ url: path, ...('password' in opened && { password: opened.password }) });
  });

  // Snapshots of the VM: taken, restored onto it (stopping it for the copy and starting it again),
  // cloned into a new VM; each made as the CLI makes it, for a person RBAC lets create it.
  const createAs = async (
    res: Response,
    vm: VirtualMachine,
    plural: string,
    body: { kind: string; metadata: object; spec: object },
    event: string,
  ) => {
    const { person } = sessionOf(res);
    const namespace = vm.metadata.namespace!;
    let created: { metadata: { name: string } };
    try {
      created = (await clients.customObjects.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        plural,
        namespace,
        body: {
          apiVersion: API_VERSION,
          ...body,
          metadata: { ...body.metadata, annotations: { [REQUESTED_BY_ANNOTATION]: person.user } },
        },
      })) as typeof created;
    } catch (err) {
      const rejection = apiserverRejection(err);
      if (rejection === undefined) throw err;
      return refuse(res, 422, rejection);
    }
    await deps.recordEvent(eventObjectOf(vm), {
      type: 'Normal',
      reason: 'RequestedInWebGui',
      message: `${person.user} asked to ${event} (${body.kind} ${created.metadata.name})`,
    });
    res.status(201).json({ name: created.metadata.name });
  };
  const vmThePersonMay = async (res: Response, namespace: string, name: string, action: Action) => {
    const vm = await visibleVm(res, namespace, name);
    if (!vm) return undefined;
    if (await access.mayOnVm(sessionOf(res).person, vm, action)) return vm;
    refuse(res, 403, `you may not ${action} ${name}`);
    return undefined;
  };
  const snapshotOf = (res: Response, vm: VirtualMachine, snapshot: string) => {
    const found = access
      .snapshotsOf(vm.metadata.namespace!, vm.metadata.name)
      .find((s) => s.metadata.name === snapshot);
    if (found?.status?.phase === 'Ready') return found;
    refuse(
      res,
      found ? 409 : 404,
      found ? `snapshot ${snapshot} is not Ready` : `${vm.metadata.name} has no snapshot ${snapshot}`,
    );
    return undefined;
  };

  router.post('/vms/:namespace/:name/snapshots', async (req, res) => {
    const { namespace, name } = req.params;
    const vm = await vmThePersonMay(res, namespace, name, 'snapshot');
    if (!vm) return;
    await createAs(
      res,
      vm,
      SNAPSHOT_PLURAL,
      { kind: SNAPSHOT_KIND, metadata: { generateName: `${name}-` }, spec: { virtualMachineName: name } },
      'take a snapshot',
    );
  });

  router.post('/vms/:namespace/:name/snapshots/:snapshot/restore', async (req, res) => {
    const { namespace, name, snapshot } = req.params;
    const vm = await vmThePersonMay(res, namespace, name, 'restore');
    if (!vm || !snapshotOf(res, vm, snapshot)) return;
    await createAs(
      res,
      vm,
      RESTORE_PLURAL,
      {
        kind: RESTORE_KIND,
        metadata: { generateName: `${name}-restore-` },
        spec: { virtualMachineName: name, virtualMachineSnapshotName: snapshot, stopVirtualMachine: true },
      },
      `restore snapshot ${snapshot}`,
    );
  });

  router.post('/vms/:namespace/:name/snapshots/:snapshot/clone', async (req, res) => {
    const { namespace, name, snapshot } = req.params;
    const newName = CloneSpec.shape.newVirtualMachineName.safeParse((req.body as { name?: unknown })?.name);
    if (!newName.success)
      return refuse(res, 400, `name: ${newName.error.issues.map((i) => i.message).join('; ')}`);
    const vm = await vmThePersonMay(res, namespace, name, 'clone');
    if (!vm || !snapshotOf(res, vm, snapshot)) return;
    await createAs(
      res,
      vm,
      CLONE_PLURAL,
      {
        kind: CLONE_KIND,
        metadata: { generateName: `${newName.data}-clone-` },
        spec: { virtualMachineSnapshotName: snapshot, newVirtualMachineName: newName.data },
      },
      `clone snapshot ${snapshot} as ${newName.data}`,
    );
  });

  router.post('/vms/:namespace/:name/:operation', async (req, res) => {
    const { namespace, name, operation } = req.params;
    const known = OPERATIONS[operation];
    if (!known) return refuse(res, 404, `no operation ${operation}`);
    const vm = await visibleVm(res, namespace, name);
    if (!vm) return;
    const { person } = sessionOf(res);
    if (!(await access.mayOnVm(person, vm, known.action)))
      return refuse(res, 403, `you may not ${operation} ${name}`);
    const created = await clients.customObjects.createNamespacedCustomObject({
      ...operationApiRef(namespace),
      body: {
        apiVersion: API_VERSION,
        kind: OPERATION_KIND,
        metadata: {
          generateName: `${name}-${operation}-`,
          annotations: { [REQUESTED_BY_ANNOTATION]: person.user },
        },
        spec: { virtualMachineName: name, type: known.type },
      },
    });
    await deps.recordEvent(eventObjectOf(vm), {
      type: 'Normal',
      reason: 'RequestedInWebGui',
      message: `${person.user} asked to ${operation} it`,
    });
    res.status(202).json({ operation: (created as { metadata: { name: string } }).metadata.name });
  });

  router.patch('/vms/:namespace/:name/resources', async (req, res) => {
    const { namespace, name } = req.params;
    const body = Resources.safeParse(req.body);
    if (!body.success)
      return refuse(
        res,
        400,
        body.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; '),
      );
    const vm = await visibleVm(res, namespace, name);
    if (!vm) return;
    const { person } = sessionOf(res);
    if (!(await access.mayOnVm(person, vm, 'resources')))
      return refuse(res, 403, `you may not change the CPUs or RAM of ${name}`);
    try {
      await clients.customObjects.patchNamespacedCustomObject(
        { ...vmApiRef(namespace, name), body: { spec: { vm: body.data } } },
        mergePatch,
      );
    } catch (err) {
      const rejection = apiserverRejection(err);
      if (rejection === undefined) throw err;
      return refuse(res, 422, rejection);
    }
    const changes = Object.entries(body.data)
      .map(([field, value]) => `${field} ${value}`)
      .join(', ');
    await deps.recordEvent(eventObjectOf(vm), {
      type: 'Normal',
      reason: 'RequestedInWebGui',
      message: `${person.user} set ${changes}`,
    });
    res.status(204).end();
  });

  router.post('/pools/:namespace/:name/assignment', async (req, res) => {
    const { namespace, name } = req.params;
    const { person } = sessionOf(res);
    const pool = access.pool(namespace, name);
    if (!pool || !(await access.mayUsePool(person, pool)))
      return refuse(res, 404, `there is no pool ${name} in ${namespace} that you may use`);
    const outcome = await assignFromPool(
      { clients, lock: deps.lock, recordEvent: deps.recordEvent },
      { namespace, pool: name, user: person.user },
    );
    if (outcome.vm === undefined) return refuse(res, 409, outcome.message);
    res.json(outcome);
  });

  return router;
}
