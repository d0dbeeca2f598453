import { describe, expect, it } from 'vitest';
import { CONFIG_VERSION_ANNOTATION } from '../../../../src/reconcilers/virtual-machine/naming.js';
import { runnerConfigStep } from '../../../../src/reconcilers/virtual-machine/runner-config/step.js';
import { callNames, runningPod, testVm, vmState } from './vm-state-fixture.js';

const vmRunningIn = (pod = runningPod()) => ({
  vm: testVm({ display: { outputs: 1 } }, { status: { runnerPod: { name: 'vm', uid: 'vm-uid' } } }),
  seen: { pods: { runner: [pod], importer: [], attach: [] } },
});

describe('step: runner config', () => {
  it('writes the ConfigMap, then nudges the running pod so kubelet refreshes its copy at once', async () => {
    const { state, calls } = vmState(vmRunningIn());
    const result = await runnerConfigStep.run(state);
    expect(callNames(calls)).toEqual(['apply', 'core.patchNamespacedPod']);
    expect((calls[0]!.args as { data: Record<string, string> }).data['config.yaml']).toBe(
      state.plan.runnerConfig.yaml,
    );
    expect(result).toMatchObject({
      writes: ['ConfigMap', 'Pod annotation (config 11)'],
      requeueAfterMs: 2_000,
    });
    const patch = calls[1]!.args as { body: { metadata: { annotations: Record<string, string> } } };
    expect(patch.body.metadata.annotations[CONFIG_VERSION_ANNOTATION]).toBe('11');
  });

  it('changes nothing while the VM migrates: both runners read the one config', async () => {
    const fixture = vmRunningIn();
    const { state, calls } = vmState(fixture);
    state.plan.migration.plan.migrating = true;
    expect(await runnerConfigStep.run(state)).toBeUndefined();
    expect(calls).toEqual([]);
  });

  it('no nudge without a pod, or when nudging is off', async () => {
    const { state, calls } = vmState({ vm: testVm({ display: { outputs: 1 } }) });
    expect(await runnerConfigStep.run(state)).toEqual({ writes: ['ConfigMap'] });
    expect(callNames(calls)).toEqual(['apply']);
    const off = vmState({ ...vmRunningIn(), options: { configNudge: false } });
    await runnerConfigStep.run(off.state);
    expect(callNames(off.calls)).toEqual(['apply']);
  });
});
