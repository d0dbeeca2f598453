// A runner pod kube-scheduler left unschedulable for claims that are bound meanwhile
// (disks/claim-binding.ts says when): it is made again, and the VM says why.
import { deletePodByUid } from '../../../kube/clients.js';
import { STUCK_ON_BOUND_CLAIMS_MS, stuckOnBoundClaims } from '../disks/claim-binding.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const stuckRunnerPodStep: Step<VmState> = {
  name: 'runner pod stuck on bound claims',
  owned: true,
  async run({ seen, io, pod }) {
    const stuck = stuckOnBoundClaims(pod, seen.claims, seen.now);
    if (!stuck) return;
    if ('recheckInMs' in stuck) return { requeueAfterMs: stuck.recheckInMs };
    const { name, uid } = pod!.metadata!;
    if (!(await deletePodByUid(io.clients.core, { name: name!, namespace: seen.namespace, uid: uid! })))
      return;
    return {
      writes: [`Pod ${name} deleted (unschedulable for claims that are bound)`],
      events: [
        {
          type: 'Normal',
          reason: 'RecreatingRunnerPod',
          message: `the runner pod stayed unschedulable for ${STUCK_ON_BOUND_CLAIMS_MS / 1000} s for claims that are bound: making it again`,
        },
      ],
    };
  },
};
