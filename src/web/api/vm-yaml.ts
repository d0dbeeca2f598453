// A VM as YAML, to read and to edit in the page, as `kubectl edit` does: the edit becomes a merge
// patch of what changed, made only on the version the person loaded, checked by the apiserver in a
// dry run first (schema, admission policies) and refused with its message.
import { ApiException } from '@kubernetes/client-node';
import { Router, type Response } from 'express';
import { parse, stringify } from 'yaml';
import { z } from 'zod';
import { apiserverRejection } from '../../kube/clients.js';
import { isPlainObject, mergePatch, statusPatch } from '../../kube/merge-patch.js';
import { vmApiRef } from '../../reconcilers/virtual-machine/naming.js';
import { recordRequest, refuse, sessionOf, vmThePersonMay, visibleVm, type ApiDeps } from './common.js';

const Edit = z.object({ yaml: z.string().max(256 * 1024) }).strict();

/** What the editor shows of the VM: what a person writes, not its status or managed fields. */
function editable(object: Record<string, unknown>): Record<string, unknown> {
  const { status: _status, ...rest } = object;
  const { managedFields: _managed, ...metadata } = (rest.metadata ?? {}) as Record<string, unknown>;
  return { ...rest, metadata };
}

/** The apiserver's refusal of a patch as the GUI's answer; false when it was something else. */
function refused(res: Response, err: unknown, name: string): boolean {
  if (err instanceof ApiException && err.code === 409) {
    refuse(res, 409, `${name} changed since you loaded it: load it again, then edit`);
    return true;
  }
  const rejection = apiserverRejection(err);
  if (rejection === undefined) return false;
  refuse(res, 422, rejection);
  return true;
}

export function vmYamlRouter(deps: ApiDeps): Router {
  const { access, clients } = deps;
  const router = Router();
  const read = async (namespace: string, name: string) =>
    editable(
      (await clients.customObjects.getNamespacedCustomObject(vmApiRef(namespace, name))) as Record<
        string,
        unknown
      >,
    );

  router.get('/vms/:namespace/:name/yaml', async (req, res) => {
    const { namespace, name } = req.params;
    if (!(await visibleVm(access, res, namespace, name))) return;
    res.json({ yaml: stringify(await read(namespace, name)) });
  });

  // ?dryRun=true only checks: the apiserver answers as it would, nothing changes.
  router.put('/vms/:namespace/:name/yaml', async (req, res) => {
    const { namespace, name } = req.params;
    const body = Edit.safeParse(req.body);
    if (!body.success) return refuse(res, 400, 'send {"yaml": "..."} of at most 256 KiB');
    const vm = await vmThePersonMay(access, res, namespace, name, 'edit');
    if (!vm) return;
    let edited: unknown;
    try {
      edited = parse(body.data.yaml);
    } catch (err) {
      return refuse(res, 400, `not YAML: ${(err as Error).message}`);
    }
    if (!isPlainObject(edited)) return refuse(res, 400, 'the YAML is not one VirtualMachine');
    const metadata = isPlainObject(edited.metadata) ? edited.metadata : {};
    if (
      edited.apiVersion !== vm.apiVersion ||
      edited.kind !== vm.kind ||
      metadata.name !== name ||
      metadata.namespace !== namespace
    )
      return refuse(res, 400, 'apiVersion, kind, metadata.name and metadata.namespace stay as they are');
    if (typeof metadata.resourceVersion !== 'string')
      return refuse(res, 400, 'metadata.resourceVersion names the version you edited; keep it');
    const current = await read(namespace, name);
    // Only what the person changed, on the version they saw (a conflict when it changed since).
    const patch = statusPatch(current, editable(edited));
    patch.metadata = { ...(patch.metadata as object), resourceVersion: metadata.resourceVersion };
    const patchVm = (dryRun?: 'All') =>
      clients.customObjects.patchNamespacedCustomObject(
        { ...vmApiRef(namespace, name), body: patch, ...(dryRun && { dryRun }) },
        mergePatch,
      );
    try {
      await patchVm('All');
      if (req.query.dryRun === 'true') return res.status(204).end();
      const saved = (await patchVm()) as Record<string, unknown>;
      await recordRequest(deps, vm, `${sessionOf(res).person.user} edited its YAML`);
      res.json({ yaml: stringify(editable(saved)) });
    } catch (err) {
      if (!refused(res, err, name)) throw err;
    }
  });

  return router;
}
