import type { Redis } from 'ioredis';
import {
  legacyRunnerRequestKey,
  REQUEST_FIELD,
  REQUEST_TTL_SECONDS,
  runnerRequestKey,
} from '../api/runner-request.js';
import type { MigrationRequest } from '../runner/migration/request.js';

/** Sends a request to the runner of a pod (api/runner-request.ts): it replaces any earlier one. */
export function runnerRequestSender(redis: Redis) {
  return async (namespace: string, podUid: string, request: MigrationRequest): Promise<void> => {
    const transaction = redis.multi();
    for (const key of [runnerRequestKey(namespace, podUid), legacyRunnerRequestKey(podUid)])
      transaction
        .xadd(key, 'MAXLEN', '1', '*', REQUEST_FIELD, JSON.stringify(request))
        .expire(key, REQUEST_TTL_SECONDS);
    const replies = await transaction.exec();
    const failed = replies?.find(([err]) => err)?.[0];
    if (failed) throw failed;
  };
}
