// What every runner pod of the namespace uses: the runner Secret (its Redis URL) and its
// ServiceAccount (identity.ts builds them).
import { desiredRunnerSecret, desiredRunnerServiceAccount } from './identity.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const runnerIdentityStep: Step<VmState> = {
  name: 'runner identity',
  owned: true,
  async run({ seen, io }) {
    const writes: string[] = [];
    const secret = desiredRunnerSecret(
      seen.namespace,
      await io.options.redisCredentials.forNamespace(seen.namespace),
    );
    if (await io.applyShared(secret, seen.owned.runnerSecret)) writes.push('runner Secret');
    if (await io.applyShared(desiredRunnerServiceAccount(seen.namespace), seen.owned.serviceAccount))
      writes.push('ServiceAccount');
    return { writes };
  },
};
