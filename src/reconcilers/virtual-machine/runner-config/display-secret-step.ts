// The VM's display Secret: a SPICE console is locked by a generated one until someone sets a
// password (display-secret.ts says when). Made before anything reads it: the runner config and
// pod name it, and its version is part of the config's.
import { apiserverRejection, isConflict } from '../../../kube/clients.js';
import { generatedDisplaySecret, wantsGeneratedDisplaySecret } from './display-secret.js';
import { STALE_CACHE } from '../observe.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const displaySecretStep: Step<VmState> = {
  name: 'display Secret',
  async run(state) {
    const { vm } = state.seen;
    state.displaySecret = state.seen.displaySecret;
    if (state.displaySecret || !wantsGeneratedDisplaySecret(vm)) return;
    try {
      state.displaySecret = await state.io.clients.core.createNamespacedSecret({
        namespace: vm.metadata.namespace!,
        body: generatedDisplaySecret(vm),
      });
    } catch (err) {
      if (isConflict(err)) {
        // Another replica made it, and this one's cache has not got it yet: its watch brings it and the key back.
        state.io.logger.debug(
          { key: state.seen.key },
          'the display Secret exists but is not cached yet; trying again',
        );
        return { end: { requeueAfter: STALE_CACHE.retryMs } };
      }
      state.rejected = apiserverRejection(err);
      if (state.rejected === undefined) throw err;
      return;
    }
    return { writes: ['display Secret (generated, locked)'] };
  },
};
