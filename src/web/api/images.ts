// The VirtualMachineImages of the namespaces whose images the person may list (RBAC), with their
// import's progress: what the Images page shows.
import { Router } from 'express';
import { sessionOf, type ApiDeps } from './common.js';

export function imagesRouter(deps: ApiDeps): Router {
  const { access } = deps;
  const router = Router();

  router.get('/images', async (_req, res) => {
    const namespaces = await access.namespacesSeeingImages(sessionOf(res).person, await deps.namespaces());
    res.json({ namespaces, images: access.images(namespaces) });
  });

  return router;
}
