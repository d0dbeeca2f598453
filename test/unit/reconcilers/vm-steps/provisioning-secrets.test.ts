import { describe, expect, it } from 'vitest';
import { provisioningSecretsStep } from '../../../../src/reconcilers/virtual-machine/runner-config/provisioning-secrets-step.js';
import { testVm, vmState } from './vm-state-fixture.js';

describe('step: provisioning Secrets', () => {
  it('looks again in 15 s for a Secret the spec names that is missing (Secrets are not watched)', () => {
    const vm = testVm(
      {},
      { spec: { cloudInit: { secretRef: { name: 'user-data' } }, vm: { maximumRam: '256Mi' } } },
    );
    const { state } = vmState({ vm, seen: { provisioningSecrets: { cloudInit: null } } });
    expect(state.specErrors.join()).toMatch(/user-data/);
    expect(provisioningSecretsStep.run(state)).toEqual({ requeueAfterMs: 15_000 });
  });

  it('nothing to look at again when the Secrets are there or none is named', () => {
    expect(provisioningSecretsStep.run(vmState().state)).toBeUndefined();
  });
});
