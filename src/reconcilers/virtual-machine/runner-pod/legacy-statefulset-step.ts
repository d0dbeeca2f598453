// vmop 0.1 ran VMs from a StatefulSet: it goes, its pod stays and is adopted (no restart). No new
// pod is made while it is there.
import { retireStatefulSet } from './writes.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const legacyStatefulSetStep: Step<VmState> = {
  name: 'StatefulSet of vmop 0.1',
  owned: true,
  async run(state) {
    const legacy = state.seen.owned.statefulSet;
    if (!legacy) return;
    state.podPlan = { ...state.podPlan, create: undefined }; // it must be gone before a pod is made
    if (legacy.metadata?.deletionTimestamp) return;
    await retireStatefulSet(state.io.clients, legacy);
    return { writes: ['StatefulSet (deleted; its pod is kept)'] };
  },
};
