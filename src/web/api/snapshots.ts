// Snapshots of a VM in the GUI: taken, restored onto it (stopping it for the copy and starting it
// again), cloned into a new VM; each made as the CLI makes it, for a person RBAC lets create it.
import { Router, type Response } from 'express';
import { API_VERSION, GROUP, VERSION, type VirtualMachine } from '../../api/virtual-machine.js';
import { CLONE_KIND, CLONE_PLURAL, CloneSpec } from '../../api/virtual-machine-clone.js';
import { RESTORE_KIND, RESTORE_PLURAL } from '../../api/virtual-machine-restore.js';
import { SNAPSHOT_KIND, SNAPSHOT_PLURAL } from '../../api/virtual-machine-snapshot.js';
import { apiserverRejection } from '../../kube/clients.js';
import {
  REQUESTED_BY_ANNOTATION,
  recordRequest,
  refuse,
  sessionOf,
  vmThePersonMay,
  type ApiDeps,
} from './common.js';

export function snapshotsRouter(deps: ApiDeps): Router {
  const { access, clients } = deps;
  const router = Router();

  /** Creates `body` in the VM's namespace as asked by the person (refused in the apiserver's words). */
  const createAs = async (
    res: Response,
    vm: VirtualMachine,
    plural: string,
    body: { kind: string; metadata: object; spec: object },
    event: string,
  ) => {
    const { person } = sessionOf(res);
    let created: { metadata: { name: string } };
    try {
      created = (await clients.customObjects.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        plural,
        namespace: vm.metadata.namespace!,
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
    await recordRequest(deps, vm, `${person.user} asked to ${event} (${body.kind} ${created.metadata.name})`);
    res.status(201).json({ name: created.metadata.name });
  };
  /** The VM's snapshot, if it is Ready; refused (404 or 409) when not. */
  const readySnapshot = (res: Response, vm: VirtualMachine, snapshot: string) => {
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
    const vm = await vmThePersonMay(access, res, namespace, name, 'snapshot');
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
    const vm = await vmThePersonMay(access, res, namespace, name, 'restore');
    if (!vm || !readySnapshot(res, vm, snapshot)) return;
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
    const vm = await vmThePersonMay(access, res, namespace, name, 'clone');
    if (!vm || !readySnapshot(res, vm, snapshot)) return;
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

  return router;
}
