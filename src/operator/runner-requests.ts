import type { Redis } from 'ioredis';
import { REQUEST_FIELD, REQUEST_TTL_SECONDS, runnerRequestKey } from '../api/runner-request.js';
import type { MigrationRequest } from '../runner/migration/request.js';

/** Sends a request to the runner of a pod (api/runner-request.ts): it replaces any earlier one. */
export function runnerRequestSender(redis: Redis) {
  return async (podUid: string, request: MigrationRequest): Promise<void> => {
    const key = runnerRequestKey(podUid);
    const replies = await redis
      .multi()
      .xadd(key, 'MAXLEN', '1', '*', REQUEST_FIELD, JSON.stringify(request))
      .expire(key, REQUEST_TTL_SECONDS)
      .exec();
    const failed = replies?.find(([err]) => err)?.[0];
    if (failed) throw failed;
  };
}
