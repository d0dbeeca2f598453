// Makes the runner pod the status names now (the status step decided it, and wrote the name in a
// guarded write), and the claims it needs that do not exist yet. A pod (or claim) the apiserver
// refuses is said in the status at once, since nothing retries it.
import { apiserverRejection } from '../../../kube/clients.js';
import { withAssignment } from '../../../pools/assignment.js';
import { desiredRunnerPod } from './pod.js';
import { routedNicOfVm } from '../address/routed-nic.js';
import { createRunnerPod } from './writes.js';
import { deriveStatus } from '../status/derive.js';
import { writeStatus } from '../status/step.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const runnerPodCreationStep: Step<VmState> = {
  name: 'runner pod creation',
  async run(state) {
    const { seen, plan, io } = state;
    if (!state.creating) return;
    const imageRepository = seen.owned.imageRepository;
    const pod = desiredRunnerPod(plan.vm, {
      name: state.podPlan.create!,
      claims: plan.claims,
      defaultRunnerImage: io.options.defaultRunnerImage,
      displaySecretName: state.displaySecret?.metadata?.name,
      hasImageRepository: imageRepository !== undefined && !imageRepository.metadata?.deletionTimestamp,
      overcommit: io.options.overcommit,
      kvm: io.options.kvm ?? true,
      routedNic: routedNicOfVm(plan.vm, plan.ipAddress.address),
    });
    try {
      return { writes: await createRunnerPod(io.clients, plan.claims, pod) };
    } catch (err) {
      state.rejected = apiserverRejection(err);
      if (state.rejected === undefined) throw err;
      const facts = { ...state.observedForStatus!, rejected: state.rejected, creatingPod: undefined };
      state.status = withAssignment(deriveStatus(seen.vm, facts), state.held?.assignment);
      return writeStatus(state, state.status);
    }
  },
};
