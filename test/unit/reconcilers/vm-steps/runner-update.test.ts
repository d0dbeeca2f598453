import { describe, expect, it } from 'vitest';
import { runnerUpdateStep } from '../../../../src/reconcilers/virtual-machine/runner-pod/update-step.js';
import type { RunnerUpdateMethod } from '../../../../src/reconcilers/virtual-machine/runner-pod/update.js';
import { statusStep } from '../../../../src/reconcilers/virtual-machine/status/step.js';
import { callNames, runningPod, testVm, vmState } from './vm-state-fixture.js';

const MOVABLE = { migratable: true, reason: 'Migratable', message: 'it can move' };
const PINNED = { migratable: false, reason: 'PinnedToNode', message: 'spec.nodeName pins it' };

/** A running VM whose runner pod runs `image`, while the manager's default is runner:2. */
function runningOn(
  image: string,
  options: { spec?: object; method?: RunnerUpdateMethod; annotations?: object } = {},
) {
  const pod = runningPod('vm', {
    spec: { nodeName: 'node-1', containers: [{ name: 'runner', image }] },
  });
  const fixture = vmState({
    vm: testVm(
      {},
      {
        metadata: {
          name: 'vm',
          namespace: 'ns',
          uid: 'vm-uid',
          generation: 1,
          resourceVersion: '10',
          annotations: options.annotations,
        },
        ...(options.spec && { spec: { vm: { state: 'Running', maximumRam: '256Mi' }, ...options.spec } }),
        status: { runnerPod: { name: 'vm', uid: 'vm-uid' } },
      },
    ),
    seen: { pods: { runner: [pod], importer: [], attach: [] } },
    options: {
      defaultRunnerImage: { image: 'runner:2' },
      ...(options.method && { runnerUpdate: options.method }),
    },
  });
  return fixture;
}

describe('step: runner update (an upgrade moves VMs onto the new runner image)', () => {
  it('a VM on an older runner image is shown outdated and moved live, once per runner pod', async () => {
    const { state, calls } = runningOn('runner:1');
    expect(state.plan.outdatedRunner).toBe(true);
    state.plan.migration.migratable = MOVABLE;
    const result = await runnerUpdateStep.run(state);
    expect(callNames(calls)).toEqual(['createOperation']);
    expect(calls[0]!.args).toMatchObject({
      metadata: { name: 'vm-runner-update-vmuid' },
      spec: { virtualMachineName: 'vm', type: 'Migrate' },
    });
    expect(result?.events).toEqual([
      {
        type: 'Normal',
        reason: 'RunnerUpdate',
        message: 'it runs an older runner image than runner:2: moving it live onto it',
      },
    ]);
    // The status says so (written by the status step).
    const { state: next, calls: written } = runningOn('runner:1');
    await statusStep.run(next);
    const patch = written.find((call) => call.call === 'customObjects.patchNamespacedCustomObjectStatus');
    expect(patch?.args).toMatchObject({
      body: { status: { runnerPod: { name: 'vm', uid: 'vm-uid', image: 'runner:1', outdated: true } } },
    });
  });

  it('leaves alone a VM on the default image, one that names its own, one busy with an operation, and all under None', async () => {
    const cases = [
      runningOn('runner:2'),
      runningOn('mine:7', { spec: { image: { source: 'mine:8' } } }),
      runningOn('runner:1', { annotations: { 'vmoperator.jdrupes.org/operation': 'vm-stop' } }),
      runningOn('runner:1', { method: 'None' }),
    ];
    for (const { state, calls } of cases) {
      state.plan.migration.migratable = MOVABLE;
      expect(await runnerUpdateStep.run(state)).toEqual({});
      expect(calls).toEqual([]);
    }
    expect(cases.map(({ state }) => state.plan.outdatedRunner)).toEqual([false, false, true, true]);
  });

  it('one that cannot move waits for its next restart, unless LiveMigrateOrRestart restarts it', async () => {
    const left = runningOn('runner:1');
    left.state.plan.migration.migratable = PINNED;
    expect(await runnerUpdateStep.run(left.state)).toEqual({});
    const restarted = runningOn('runner:1', { method: 'LiveMigrateOrRestart' });
    restarted.state.plan.migration.migratable = PINNED;
    await runnerUpdateStep.run(restarted.state);
    expect(restarted.calls[0]!.args).toMatchObject({ spec: { type: 'Restart' } });
  });
});
