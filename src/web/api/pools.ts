// A VM from a pool, for the person who asks (pools/assign.ts picks and starts it).
import { Router } from 'express';
import { assignFromPool } from '../../pools/assign.js';
import { refuse, sessionOf, type ApiDeps } from './common.js';

export function poolsRouter(deps: ApiDeps): Router {
  const { access, clients } = deps;
  const router = Router();

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
