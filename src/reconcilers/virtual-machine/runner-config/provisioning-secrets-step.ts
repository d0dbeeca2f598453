// The user's provisioning Secrets (cloud-init, sysprep): plan.ts checks them; they are not
// watched, so a missing or incomplete one is looked at again.
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

const SECRET_RECHECK_MS = 15_000;

export const provisioningSecretsStep: Step<VmState> = {
  name: 'provisioning Secrets',
  run: (state) => (state.plan.secretErrors.length > 0 ? { requeueAfterMs: SECRET_RECHECK_MS } : undefined),
};
