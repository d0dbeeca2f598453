// The person's own view: who they are, the cluster's use over 24 h (for people who may see every
// VM), and the live stream of their VMs and pools.
import { Router } from 'express';
import { refuse, sessionOf, type ApiDeps } from './common.js';

/** Keeps proxies from closing an idle event stream. */
const HEARTBEAT_MS = 20_000;

export function sessionRouter(deps: ApiDeps): Router {
  const { access } = deps;
  const router = Router();

  router.get('/me', async (_req, res) => {
    const { person, csrf } = sessionOf(res);
    // Whether the All VMs page lists the cluster's VMs or only this person's (it says which), and
    // whether the Nodes page is theirs.
    // Namespaces that cannot be listed now offer no New VM and no Images; the page works on.
    const namespaces = deps.namespaces().catch((): string[] => []);
    const [seesCluster, seesNodes, createsIn, imagesIn] = await Promise.all([
      access.seesCluster(person),
      access.seesNodes(person),
      namespaces.then((all) => access.namespacesToCreateIn(person, all)),
      namespaces.then((all) => access.namespacesSeeingImages(person, all)),
    ]);
    // Whether the page offers New VM and Images.
    res.json({
      ...person,
      csrf,
      seesCluster,
      seesNodes,
      createsVms: createsIn.length > 0,
      seesImages: imagesIn.length > 0,
    });
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

  return router;
}
