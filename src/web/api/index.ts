// The GUI's API (JSON, under /api; the session middleware has checked the login and, for changes,
// the CSRF token): one router per resource. Every change goes to the apiserver as an operation or
// a patch by the manager, after checking the person may, and an Event on the VM names who asked.
import { Router } from 'express';
import type { ApiDeps } from './common.js';
import { imagesRouter } from './images.js';
import { nodesRouter } from './nodes.js';
import { poolsRouter } from './pools.js';
import { sessionRouter } from './session.js';
import { snapshotsRouter } from './snapshots.js';
import { vmCreateRouter } from './vm-create.js';
import { vmYamlRouter } from './vm-yaml.js';
import { vmsRouter } from './vms.js';

export type { ApiDeps } from './common.js';

export function apiRouter(deps: ApiDeps): Router {
  return (
    Router()
      .use(sessionRouter(deps))
      // Before the VMs' `/vms/:namespace/:name/:operation`, which would take `snapshots` for one.
      .use(snapshotsRouter(deps))
      .use(vmYamlRouter(deps))
      .use(vmCreateRouter(deps))
      .use(vmsRouter(deps))
      .use(poolsRouter(deps))
      .use(nodesRouter(deps))
      .use(imagesRouter(deps))
  );
}
