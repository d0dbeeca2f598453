// A VM whose start failed is started again after its back-off (start-backoff.ts): its pod goes,
// and the next reconcile makes a new one, whose runner tries again.
import { deletePodByUid } from '../../../kube/clients.js';
import { startRetryInMs } from './start-backoff.js';
import { currentSnapshot } from '../status/derive.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const startRetryStep: Step<VmState> = {
  name: 'start retry',
  async run({ seen, plan, io, pod, status, policyStop }) {
    if (policyStop) return;
    const ownSnapshot = currentSnapshot(plan.podSnapshot, pod, seen.vm.status);
    const retryInMs = startRetryInMs(status?.startFailure, ownSnapshot, plan.runnerConfig.digest, io.now());
    if (retryInMs === undefined) return;
    if (retryInMs > 0) return { requeueAfterMs: retryInMs };
    if (!pod || pod.metadata?.deletionTimestamp) return;
    const { name, namespace, uid } = pod.metadata!;
    if (!(await deletePodByUid(io.clients.core, { name: name!, namespace: namespace!, uid: uid! }))) return;
    const failures = status?.startFailure?.consecutiveFailCount ?? 0;
    return {
      writes: ['Pod deleted (start retry)'],
      events: [
        {
          type: 'Normal',
          reason: 'RetryingStart',
          message:
            failures > 0
              ? `starting the VM again after ${failures} failed start(s) in a row`
              : 'starting the VM again (an operation reset the start back-off)',
        },
      ],
    };
  },
};
