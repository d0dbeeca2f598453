// Requests to a runner that must act within a second (a live migration's start or abort) go
// through Redis, not through the pod: kubelet refreshes a pod's downward-API files only on its own
// sync (minutes). Each runner pod has a stream of its requests, keyed by its namespace (whose
// runners alone may read it, api/tenant-redis.ts) and the pod's uid, so a new pod of the same name
// never reads an old one's; only its latest entry counts. The pod's
// annotation stays the record (a restarted runner reads it; the manager sends it again when the
// runner has not acted on it, e.g. after Redis came back empty).

/** The stream of requests to the runner of the pod with `podUid` in `namespace`. */
export const runnerRequestKey = (namespace: string, podUid: string) => `vmop:request:${namespace}/${podUid}`;

/**
 * Where runners before per-namespace credentials read their requests: sent there too, so a VM
 * whose runner is that old still moves live (to a new runner) after an upgrade.
 */
export const legacyRunnerRequestKey = (podUid: string) => `vmop:request:${podUid}`;

/** The field of a stream entry that holds the request (JSON). */
export const REQUEST_FIELD = 'request';

/** A stream outlives its last request by a day (a migration ends long before), then goes. */
export const REQUEST_TTL_SECONDS = 86_400;
