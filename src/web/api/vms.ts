// A VM in the GUI: its page (what it is, what happened to it, its use in the last hour), a console
// ticket, the operations (start, stop, …) and its CPUs and RAM. Each change is asked of the
// apiserver as the CLI asks it, after checking the person may.
import { Router } from 'express';
import { z } from 'zod';
import { Quantity } from '../../api/kubernetes-types.js';
import { OPERATION_KIND, operationApiRef, type OperationType } from '../../api/virtual-machine-operation.js';
import { API_VERSION } from '../../api/virtual-machine.js';
import { USAGE_SAMPLE_SECONDS } from '../../api/vm-usage-history.js';
import { apiserverRejection } from '../../kube/clients.js';
import { mergePatch } from '../../kube/merge-patch.js';
import { vmApiRef } from '../../reconcilers/virtual-machine/naming.js';
import { CONSOLE_KINDS, TICKET_COOKIE, TICKET_SECONDS, consolePath } from '../consoles.js';
import type { Action } from '../permissions.js';
import { snapshotRows, vmDetails } from '../vm-details.js';
import {
  REQUESTED_BY_ANNOTATION,
  recordRequest,
  refuse,
  sessionOf,
  vmThePersonMay,
  type ApiDeps,
} from './common.js';

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

export function vmsRouter(deps: ApiDeps): Router {
  const { access, clients } = deps;
  const router = Router();

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

  // A console ticket (and for a display a one-time password) for the person's page.
  router.post('/vms/:namespace/:name/console/:kind', async (req, res) => {
    const { namespace, name } = req.params;
    const kind = CONSOLE_KINDS.find((known) => known === req.params.kind);
    if (!kind) return refuse(res, 404, `no console ${req.params.kind}`);
    const vm = await vmThePersonMay(
      access,
      res,
      namespace,
      name,
      'accessConsole',
      `you may not open the console of ${name}`,
    );
    if (!vm) return;
    const session = sessionOf(res);
    const opened =
      kind === 'serial'
        ? await deps.consoles.openSerial(session.id, session.person, vm)
        : await deps.consoles.openDisplay(session.id, session.person, vm, kind);
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

  router.post('/vms/:namespace/:name/:operation', async (req, res) => {
    const { namespace, name, operation } = req.params;
    const known = OPERATIONS[operation];
    if (!known) return refuse(res, 404, `no operation ${operation}`);
    const vm = await vmThePersonMay(access, res, namespace, name, known.action);
    if (!vm) return;
    const { person } = sessionOf(res);
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
    await recordRequest(deps, vm, `${person.user} asked to ${operation} it`);
    res.status(202).json({ operation: (created as { metadata: { name: string } }).metadata.name });
  });

  // The VM goes as with `kubectl delete vm`: its pod and ConfigMap with it, its disks' claims kept.
  router.delete('/vms/:namespace/:name', async (req, res) => {
    const { namespace, name } = req.params;
    const vm = await vmThePersonMay(access, res, namespace, name, 'delete');
    if (!vm) return;
    await recordRequest(deps, vm, `${sessionOf(res).person.user} asked to delete it`);
    try {
      // Exactly the VM the person was allowed, not one made since under the same name.
      await clients.customObjects.deleteNamespacedCustomObject({
        ...vmApiRef(namespace, name),
        body: { preconditions: { uid: vm.metadata.uid } },
      });
    } catch (err) {
      const rejection = apiserverRejection(err);
      if (rejection === undefined) throw err;
      return refuse(res, 422, rejection);
    }
    res.status(204).end();
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
    const vm = await vmThePersonMay(
      access,
      res,
      namespace,
      name,
      'resources',
      `you may not change the CPUs or RAM of ${name}`,
    );
    if (!vm) return;
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
    await recordRequest(deps, vm, `${sessionOf(res).person.user} set ${changes}`);
    res.status(204).end();
  });

  return router;
}
