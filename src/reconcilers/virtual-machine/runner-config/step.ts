// The runner config in the VM's ConfigMap, and the nudge that makes kubelet refresh a running
// pod's copy at once (nudge.ts). Runtime changes wait for a migration: both runners read
// the one config.
import { CONFIG_VERSION_ANNOTATION } from '../naming.js';
import { desiredConfigMap } from './config-map.js';
import { nudgeDecision } from './nudge.js';
import { mergePatch } from '../../../kube/merge-patch.js';
import type { Step, StepResult } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const runnerConfigStep: Step<VmState> = {
  name: 'runner config',
  owned: true,
  async run(state) {
    const { seen, plan, io, pod } = state;
    if (plan.migration.plan.migrating) return;
    const result: StepResult = { writes: [] };
    const current = seen.owned.configMap;
    const applied = await io.apply(desiredConfigMap(seen.vm, plan.runnerConfig.yaml), current);
    if (applied) result.writes!.push('ConfigMap');
    if (io.options.configNudge === false || !pod) return result;
    const configMapVersion = (applied ?? current)?.metadata?.resourceVersion ?? '';
    const nudge = nudgeDecision({
      pod,
      configVersion: [configMapVersion, state.displaySecret?.metadata?.resourceVersion]
        .filter(Boolean)
        .join('/'),
      configDigest: plan.runnerConfig.digest,
      snapshot: plan.podSnapshot,
      now: seen.now,
    });
    if (nudge.annotations) {
      await io.clients.core.patchNamespacedPod(
        {
          name: pod.metadata!.name!,
          namespace: seen.namespace,
          body: { metadata: { annotations: nudge.annotations } },
        },
        mergePatch,
      );
      result.writes!.push(`Pod annotation (config ${nudge.annotations[CONFIG_VERSION_ANNOTATION]})`);
    }
    result.requeueAfterMs = nudge.retryAfterMs;
    return result;
  },
};
