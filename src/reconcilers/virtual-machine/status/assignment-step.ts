// A pool assignment the status step released (its pool went, the VM left it, its retention
// passed): told in an Event, and the person logged in for it is logged out. A kept one is looked
// at again when its retention ends.
import { mergePatch } from '../../../kube/merge-patch.js';
import { vmApiRef } from '../naming.js';
import type { Step, StepResult } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const assignmentStep: Step<VmState> = {
  name: 'pool assignment',
  async run({ seen, io, held }) {
    const { vm } = seen;
    const result: StepResult = { requeueAfterMs: held?.recheckInMs };
    if (!held?.released) return result;
    result.events = [{ type: 'Normal', reason: 'AssignmentReleased', message: held.released }];
    // Logged in for the assignment (loginOnAssignment): logged out with it.
    if (vm.spec.vm.display.loggedInUser === vm.status?.assignment?.user) {
      await io.clients.customObjects.patchNamespacedCustomObject(
        {
          ...vmApiRef(seen.namespace, seen.name),
          body: { spec: { vm: { display: { loggedInUser: null } } } },
        },
        mergePatch,
      );
      result.writes = ['spec.vm.display.loggedInUser=null (assignment released)'];
    }
    return result;
  },
};
