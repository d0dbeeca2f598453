// A new VM from the GUI's form (create-form.ts): where the person may make one, and the making,
// by the manager after RBAC says the person may create VMs in that namespace. The apiserver checks
// the VM as it would the person's own `kubectl apply` (schema, CEL rules, admission policies, which
// do not spare the manager); a refusal comes back told at the field it concerns.
import { Router } from 'express';
import { GROUP, PLURAL, VERSION, type VirtualMachine } from '../../api/virtual-machine.js';
import { refusalStatus } from '../../kube/clients.js';
import { formErrors, NewVmForm, rejectionErrors, vmOfForm } from '../create-form.js';
import { recordRequest, REQUESTED_BY_ANNOTATION, refuse, sessionOf, type ApiDeps } from './common.js';

export function vmCreateRouter(deps: ApiDeps): Router {
  const { access, clients } = deps;
  const router = Router();

  // What the form offers this person: the namespaces they may create VMs in, each with its Ready images.
  router.get('/vm-form', async (_req, res) => {
    const namespaces = await access.namespacesToCreateIn(sessionOf(res).person, await deps.namespaces());
    res.json({ namespaces: namespaces.map((name) => ({ name, images: access.readyImages(name) })) });
  });

  router.post('/vms', async (req, res) => {
    const form = NewVmForm.safeParse(req.body);
    if (!form.success)
      return void res.status(400).json({ message: 'the form has errors', fields: formErrors(form.error) });
    const { namespace, name } = form.data;
    const { person } = sessionOf(res);
    if (!(await access.mayCreateVm(person, namespace)))
      return refuse(res, 403, `you may not create VMs in ${namespace}`);
    const body = vmOfForm(form.data, { [REQUESTED_BY_ANNOTATION]: person.user });
    let created: VirtualMachine;
    try {
      created = (await clients.customObjects.createNamespacedCustomObject({
        ...{ group: GROUP, version: VERSION, plural: PLURAL, namespace },
        body,
      })) as VirtualMachine;
    } catch (err) {
      const refusal = refusalStatus(err);
      if (!refusal) throw err;
      return void res
        .status(422)
        .json({ message: 'the apiserver refused the VM', fields: rejectionErrors(refusal) });
    }
    await recordRequest(deps, created, `${person.user} created it in the web GUI`);
    res.status(201).json({ namespace, name });
  });

  return router;
}
