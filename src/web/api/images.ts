// The VirtualMachineImages of the namespaces whose images the person may list (RBAC), with their
// import's progress: what the Images page shows; and an image uploaded from the person's browser:
// made with `source.upload` after RBAC says the person may create images there, then its bytes
// passed on to its importer pod in pieces (upload-proxy.ts), each from where the upload stands.
import { Router, type Response } from 'express';
import { z } from 'zod';
import { GROUP, VERSION, API_VERSION } from '../../api/virtual-machine.js';
import { IMAGE_KIND, IMAGE_PLURAL, VirtualMachineImage } from '../../api/virtual-machine-image.js';
import { refusalStatus } from '../../kube/clients.js';
import { toUploadServer } from '../upload-proxy.js';
import { refuse, sessionOf, type ApiDeps } from './common.js';

const MiB = 1024 * 1024;

/** The upload form: where, what name, and the file's size and SHA-256 (the browser computed them). */
export const NewUpload = z.object({
  namespace: z.string().min(1).max(63),
  name: z
    .string()
    .regex(
      /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/,
      'lower-case letters, digits and -, starting and ending alphanumeric',
    )
    .max(53, 'at most 53 characters'),
  /** The disk's size in bytes (a raw file's size, a qcow2 image's virtual size). */
  diskBytes: z.number().int().min(1, 'the image is empty'),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, '64 lower-case hex digits'),
});

const fieldsOf = (error: z.ZodError) =>
  Object.fromEntries(error.issues.map((issue) => [String(issue.path[0] ?? 'form'), issue.message]));

export function imagesRouter(deps: ApiDeps): Router {
  const { access, clients } = deps;
  const router = Router();

  router.get('/images', async (_req, res) => {
    const { person } = sessionOf(res);
    const all = await deps.namespaces();
    const [namespaces, uploadNamespaces] = await Promise.all([
      access.namespacesSeeingImages(person, all),
      access.namespacesToUploadIn(person, all),
    ]);
    res.json({ namespaces, uploadNamespaces, images: access.images(namespaces) });
  });

  router.post('/images', async (req, res) => {
    const form = NewUpload.safeParse(req.body);
    if (!form.success)
      return void res.status(400).json({ message: 'the form has errors', fields: fieldsOf(form.error) });
    const { namespace, name, diskBytes, sha256 } = form.data;
    if (!(await access.mayCreateImage(sessionOf(res).person, namespace)))
      return refuse(res, 403, `you may not make images in ${namespace}`);
    try {
      await clients.customObjects.createNamespacedCustomObject({
        ...{ group: GROUP, version: VERSION, plural: IMAGE_PLURAL, namespace },
        body: {
          apiVersion: API_VERSION,
          kind: IMAGE_KIND,
          metadata: { name },
          spec: { source: { upload: { sha256 } }, storage: { size: `${Math.ceil(diskBytes / MiB)}Mi` } },
        },
      });
    } catch (err) {
      const refusal = refusalStatus(err);
      if (!refusal) throw err;
      return void res.status(422).json({
        message: refusal.message ?? 'the apiserver refused the image',
        fields: { name: refusal.message ?? 'refused' },
      });
    }
    res.status(201).json({ namespace, name });
  });

  /** The image, if the person may upload into it; refused (404, 403) when not. */
  const uploadTarget = async (res: Response, namespace: string, name: string) => {
    // Made a moment ago (the page's POST) it may not be in the cache yet: then ask the apiserver.
    const image =
      access.image(namespace, name) ??
      VirtualMachineImage.safeParse(
        await clients.customObjects
          .getNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            plural: IMAGE_PLURAL,
            namespace,
            name,
          })
          .catch(() => undefined),
      ).data;
    if (!image?.spec.source.upload)
      return void refuse(res, 404, `there is no upload ${name} in ${namespace}`);
    if (!(await access.mayCreateImage(sessionOf(res).person, namespace)))
      return void refuse(res, 403, `you may not upload images into ${namespace}`);
    return image;
  };

  // Where the upload stands: the bytes the importer has, once it listens.
  router.get('/images/:namespace/:name/upload', async (req, res) => {
    const image = await uploadTarget(res, req.params.namespace, req.params.name);
    if (!image) return;
    if (image.status?.phase === 'Ready' || image.status?.phase === 'Failed')
      return void res.json({ phase: image.status.phase, message: image.status.message });
    const answer = await toUploadServer(deps.kubeConfig, clients, image, { method: 'HEAD' }).catch(
      (err: Error) => ({ status: 503, message: err.message, offset: undefined, length: undefined }),
    );
    res.json({
      phase: image.status?.phase ?? 'Pending',
      listening: answer.status === 200,
      ...(answer.offset !== undefined && { offset: answer.offset }),
      ...(answer.length !== undefined && { length: answer.length }),
    });
  });

  // A piece of the file, from the offset the importer has.
  router.patch('/images/:namespace/:name/upload', async (req, res) => {
    const image = await uploadTarget(res, req.params.namespace, req.params.name);
    if (!image) return;
    const offset = String(req.headers['upload-offset'] ?? '');
    const length = String(req.headers['upload-length'] ?? '');
    const answer = await toUploadServer(deps.kubeConfig, clients, image, {
      method: 'PATCH',
      offset,
      length,
      body: req,
    });
    // The importer's 204 becomes 200: the page needs the body, where the upload stands now.
    res
      .status(answer.status === 204 ? 200 : answer.status)
      .json({ message: answer.message, ...(answer.offset !== undefined && { offset: answer.offset }) });
  });

  return router;
}
