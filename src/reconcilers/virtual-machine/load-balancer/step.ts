// The VM's LoadBalancer Service (service.ts builds it), when the VM or the manager
// wants one. A Service of that name that is not the VM's is never taken over: the VM says so.
import type { V1Service } from '@kubernetes/client-node';
import { isDeepStrictEqual } from 'node:util';
import { isNotFound, readOptional } from '../../../kube/clients.js';
import { isSubset } from '../../../kube/subset.js';
import { desiredLoadBalancerService } from './service.js';
import { LOAD_BALANCER_CONDITION, hasCondition, serviceNameTaken } from '../status/derive.js';
import type { Step, StepResult } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

/** Foreign Services are not watched: how soon to look again at one in the way. */
const FOREIGN_RECHECK_MS = 15_000;

export const loadBalancerStep: Step<VmState> = {
  name: 'load balancer',
  owned: true,
  async run(state): Promise<StepResult | void> {
    const { seen, io } = state;
    const { vm, namespace, name } = seen;
    const desired = desiredLoadBalancerService(vm, io.options.loadBalancer ?? { enabled: false });
    // Only Services with vmop's labels are cached: before creating one, look for a foreign one.
    const current =
      seen.owned.service ??
      (desired
        ? await readOptional<V1Service>(() => io.clients.core.readNamespacedService({ name, namespace }))
        : undefined);
    const ours = current?.metadata?.ownerReferences?.some((ref) => ref.uid === vm.metadata.uid);
    if (!desired) {
      if (!current || !ours) return;
      await io.clients.core.deleteNamespacedService({ name, namespace }).catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
      return { writes: ['Service (deleted)'] };
    }
    if (current && !ours) {
      const message = serviceNameTaken(namespace, name);
      state.loadBalancer = { ready: false, message };
      const told = hasCondition(vm.status, LOAD_BALANCER_CONDITION, message);
      return {
        requeueAfterMs: FOREIGN_RECHECK_MS,
        events: told ? [] : [{ type: 'Warning', reason: 'LoadBalancerServiceNameTaken', message }],
      };
    }
    state.loadBalancer = { ready: true };
    // Exact metadata: a label or annotation taken out of the spec goes (server-side apply drops it).
    const sameMetadata =
      current &&
      isDeepStrictEqual(current.metadata?.labels ?? {}, desired.metadata!.labels) &&
      isDeepStrictEqual(current.metadata?.annotations ?? {}, desired.metadata!.annotations);
    if (sameMetadata && isSubset(desired, current)) return;
    await io.apply(desired, undefined);
    return { writes: ['Service'] };
  },
};
