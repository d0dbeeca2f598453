import type { Server } from 'node:http';
import { once } from 'node:events';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import express, { type Request, type Response, type NextFunction } from 'express';
import { WorkKeySchema } from '../keys.js';
import type { QueueInspector } from './inspector.js';

export interface Dashboard {
  url: string;
  close(): Promise<void>;
}

/**
 * bull-board over the work queue. Read-only unless `allowRetries`; even then only retries are
 * allowed, and they go through vmop (the key is added again) rather than BullMQ's job retry, which
 * would bypass the one-job-per-key deduplication.
 */
export async function startDashboard(opts: {
  inspector: QueueInspector;
  port: number;
  host: string;
  allowRetries: boolean;
}): Promise<Dashboard> {
  const { inspector, allowRetries } = opts;
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath('/');
  createBullBoard({
    queues: [
      new BullMQAdapter(inspector.bullQueue, {
        readOnlyMode: !allowRetries,
        allowRetries,
        description: 'vmop work queue: one job per key (kind:namespace/name)',
      }),
    ],
    serverAdapter,
    options: { uiConfig: { boardTitle: 'vmop queue' } },
  });

  const app = express();
  if (allowRetries) app.use(retriesThroughVmop(inspector));
  app.use('/', serverAdapter.getRouter());
  const server: Server = app.listen(opts.port, opts.host);
  await once(server, 'listening');
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : opts.port;
  return {
    url: `http://${opts.host}:${port}/`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
}

function retriesThroughVmop(inspector: QueueInspector) {
  const router = express.Router();
  router.put('/api/queues/:queueName/retry/:status', (req: Request, res: Response, next: NextFunction) => {
    if (req.params.status !== 'failed') return refuse(res);
    inspector
      .retryFailed()
      .then((keys) => res.status(200).json({ retried: keys.length, skipped: 0 }))
      .catch(next);
  });
  router.put('/api/queues/:queueName/:jobId/retry', (req: Request, res: Response, next: NextFunction) => {
    (async () => {
      const job = await inspector.bullQueue.getJob(String(req.params.jobId));
      const isFailedKey =
        job && WorkKeySchema.safeParse(job.name).success && (await job.getState()) === 'failed';
      if (!isFailedKey) return refuse(res);
      await inspector.retry([job.name]);
      res.status(204).end();
    })().catch(next);
  });
  // Everything else that changes the queue stays disabled.
  router.use('/api', (req: Request, res: Response, next: NextFunction) =>
    req.method === 'GET' || req.method === 'HEAD' ? next() : refuse(res),
  );
  return router;
}

function refuse(res: Response): void {
  res.status(405).json({ error: 'this dashboard only allows retrying failed keys' });
}
