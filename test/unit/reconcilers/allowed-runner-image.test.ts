// Which runner images a VM may name: the default, and what the admin's allow-list names.
import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import {
  runnerImageAllowed,
  runnerImageErrors,
} from '../../../src/reconcilers/virtual-machine/runner-pod/allowed-image.js';

const DEFAULT = { image: 'ghcr.io/vmop/vmop-runner:1.2' };
const vmNaming = (image?: object) =>
  VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'team-b' },
    spec: { ...(image && { image }), vm: { maximumRam: '1Gi', currentRam: '1Gi' } },
  });

describe('the runner images a VM may name', () => {
  it('are the default one and those the allow-list names exactly or by a prefix ending in *', () => {
    const allowed = ['registry.example/vmop/runner:*', 'mirror.example/runner:1.2'];
    expect(runnerImageAllowed(DEFAULT.image, DEFAULT.image, [])).toBe(true);
    expect(runnerImageAllowed('registry.example/vmop/runner:9', DEFAULT.image, allowed)).toBe(true);
    expect(runnerImageAllowed('mirror.example/runner:1.2', DEFAULT.image, allowed)).toBe(true);
    expect(runnerImageAllowed('mirror.example/runner:1.3', DEFAULT.image, allowed)).toBe(false);
    expect(runnerImageAllowed('registry.example/vmop/runner-evil:1', DEFAULT.image, allowed)).toBe(false);
    expect(runnerImageAllowed('ghcr.io/vmop/vmop-runner:latest', DEFAULT.image, [])).toBe(false);
  });

  it('refuses another in spec.image with a message naming it, in either of its forms', () => {
    expect(runnerImageErrors(vmNaming(), DEFAULT, [])).toEqual([]);
    expect(runnerImageErrors(vmNaming({ source: DEFAULT.image, pullPolicy: 'Always' }), DEFAULT, [])).toEqual(
      [],
    );
    expect(
      runnerImageErrors(vmNaming({ repository: 'evil.example', path: 'root', version: '1' }), DEFAULT, []),
    ).toEqual([
      expect.stringMatching(
        /^spec\.image: evil\.example\/root:1 is not a runner image this cluster allows \(the default is ghcr\.io\/vmop\/vmop-runner:1\.2;/,
      ),
    ]);
  });
});
