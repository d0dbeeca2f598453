// The cluster's nodes with the VMs on them: for people who may list nodes and every VM.
import { Router } from 'express';
import { refuse, sessionOf, type ApiDeps } from './common.js';

export function nodesRouter(deps: ApiDeps): Router {
  const { access } = deps;
  const router = Router();

  router.get('/nodes', async (_req, res) => {
    if (!(await access.seesNodes(sessionOf(res).person)))
      return refuse(res, 403, 'only people who may list the nodes and every VM see the nodes');
    res.json({ nodes: access.nodeViews() });
  });

  return router;
}
