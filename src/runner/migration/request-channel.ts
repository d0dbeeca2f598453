// The runner's end of its request stream (api/runner-request.ts): every request the manager sends
// reaches it within a blocking read, whatever kubelet's sync period is.
import type { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { REQUEST_FIELD, runnerRequestKey } from '../../api/runner-request.js';
import type { Logger } from '../../util/logger.js';
import { isAuthError } from '../../queue/connection.js';
import { MigrationRequest } from './request.js';

export interface RequestChannel {
  close(): void;
}

/** How long one blocking read waits before it is made again (it also ends the loop promptly on close). */
const BLOCK_MS = 5_000;
const RETRY_MS = 1_000;

type StreamReply = Array<[key: string, entries: Array<[id: string, fields: string[]]>]> | null;

/**
 * Calls `onRequest` with each request sent to the pod's runner, the latest one already there
 * first. `redis` is its own connection: a blocking read holds it.
 */
export function watchRunnerRequests(options: {
  redis: Redis;
  namespace: string;
  podUid: string;
  logger: Logger;
  onRequest: (request: MigrationRequest) => void;
}): RequestChannel {
  const { redis, logger } = options;
  redis.on('error', () => undefined); // the loop below says when reading fails
  const key = runnerRequestKey(options.namespace, options.podUid);
  let closed = false;
  // Stream ids grow with time: a stream made again after Redis came back empty reads on from here.
  let lastId = '0';
  const loop = async () => {
    while (!closed) {
      try {
        const reply = (await redis.xread('BLOCK', BLOCK_MS, 'STREAMS', key, lastId)) as StreamReply;
        for (const [, entries] of reply ?? []) {
          for (const [id, fields] of entries) {
            lastId = id;
            const request = parseEntry(fields);
            if (request) options.onRequest(request);
            else logger.warn({ id }, 'ignoring a malformed runner request');
          }
        }
      } catch (err) {
        if (closed) return;
        logger.warn({ reason: (err as Error).message }, 'reading runner requests failed; retrying');
        if (isAuthError(err)) redis.disconnect(true);
        await sleep(RETRY_MS);
      }
    }
  };
  void loop();
  return {
    close: () => {
      closed = true;
      redis.disconnect();
    },
  };
}

function parseEntry(fields: string[]): MigrationRequest | undefined {
  const at = fields.indexOf(REQUEST_FIELD);
  if (at < 0 || at % 2 !== 0) return undefined;
  try {
    return MigrationRequest.safeParse(JSON.parse(fields[at + 1]!)).data;
  } catch {
    return undefined;
  }
}
