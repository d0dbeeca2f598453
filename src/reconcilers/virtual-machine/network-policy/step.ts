// The VM's runner NetworkPolicy (policy.ts builds it), kept as the manager's settings, the VM and
// its namespace's other policies say. One of that name that is not the VM's is left alone.
import { isNotFound } from '../../../kube/clients.js';
import { isSubset } from '../../../kube/subset.js';
import { LABEL_MANAGED_BY, MANAGED_BY } from '../naming.js';
import { desiredLoadBalancerService } from '../load-balancer/service.js';
import { runnerPodLabels } from '../runner-pod/pod.js';
import {
  asClientModel,
  asWireSpec,
  desiredRunnerNetworkPolicy,
  isolatesIngress,
  runnerNetworkPolicyName,
} from './policy.js';
import type { Step, StepResult } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const networkPolicyStep: Step<VmState> = {
  name: 'network policy',
  owned: true,
  async run(state): Promise<StepResult | void> {
    const { seen, io } = state;
    const { vm, namespace } = seen;
    const settings = io.options.runnerNetworkPolicy;
    if (!settings) return;
    const name = runnerNetworkPolicyName(vm.metadata.name);
    const current = seen.networkPolicies.find((policy) => policy.metadata?.name === name);
    const ours = current?.metadata?.ownerReferences?.some((ref) => ref.uid === vm.metadata.uid);
    const labels = runnerPodLabels(vm);
    const others = seen.networkPolicies.filter(
      (policy) => policy.metadata?.labels?.[LABEL_MANAGED_BY] !== MANAGED_BY,
    );
    const desired = desiredRunnerNetworkPolicy(vm, settings, {
      isolatedByNamespace: others.some((policy) => isolatesIngress(policy, labels)),
      spiceForAll:
        desiredLoadBalancerService(vm, io.options.loadBalancer ?? { enabled: false }) !== undefined,
    });
    if (!desired) {
      if (!current || !ours) return;
      await io.clients.objects
        .delete({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace } })
        .catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
      return { writes: ['NetworkPolicy (deleted)'] };
    }
    if (current && !ours) {
      return {
        events: [
          {
            type: 'Warning',
            reason: 'NetworkPolicyNameTaken',
            message: `NetworkPolicy ${namespace}/${name} is not this VM's: its runner pods get none from vmop`,
          },
        ],
      };
    }
    if (current && isSubset(desired.spec, asWireSpec(current))) return;
    await io.apply(asClientModel(desired), undefined);
    return { writes: ['NetworkPolicy'] };
  },
};
