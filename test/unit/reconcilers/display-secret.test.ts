import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import {
  chooseDisplaySecret,
  displayPasswordErrors,
  generatedDisplaySecret,
  wantsGeneratedDisplaySecret,
} from '../../../src/reconcilers/virtual-machine/runner-config/display-secret.js';

const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));
const vmWith = (display: unknown, state = 'Running') =>
  VirtualMachine.parse({
    ...seed,
    metadata: { ...seed.metadata, uid: 'vm-uid' },
    spec: { ...seed.spec, vm: { ...seed.spec.vm, display, state } },
  });
const decode = (value: string | undefined) => Buffer.from(value ?? '', 'base64').toString();

describe('a display without a password', () => {
  const open = vmWith({ spice: { port: 5910, generateSecret: false } });
  it('is refused, saying how to fix it, unless a Secret gives it one or the admin allows it', () => {
    expect(displayPasswordErrors(open, false, false)).toEqual([
      expect.stringMatching(
        /^spec\.vm\.display\.spice\.generateSecret: false and no display Secret: .*display\.allowWithoutPassword\)$/,
      ),
    ]);
    expect(displayPasswordErrors(open, true, false)).toEqual([]);
    expect(displayPasswordErrors(open, false, true)).toEqual([]);
    expect(displayPasswordErrors(vmWith({ spice: { port: 5910 } }), false, false)).toEqual([]);
    expect(displayPasswordErrors(vmWith({ outputs: 1 }), false, false)).toEqual([]);
  });
});

describe('generated display Secret', () => {
  it('is wanted for SPICE unless generateSecret is false, and not without SPICE', () => {
    expect(wantsGeneratedDisplaySecret(vmWith({ spice: { port: 5910 } }))).toBe(true);
    expect(wantsGeneratedDisplaySecret(vmWith({ spice: { port: 5910, generateSecret: false } }))).toBe(false);
    expect(wantsGeneratedDisplaySecret(vmWith({ outputs: 1 }))).toBe(false);
  });

  it('is wanted for VNC, which is always locked, even where SPICE opts out', () => {
    expect(wantsGeneratedDisplaySecret(vmWith({ vnc: { port: 5901 } }))).toBe(true);
    expect(
      wantsGeneratedDisplaySecret(
        vmWith({ spice: { port: 5910, generateSecret: false }, vnc: { port: 5901 } }),
      ),
    ).toBe(true);
  });

  it('is wanted only once the VM is to run: a stopped VM has no console to lock', () => {
    expect(wantsGeneratedDisplaySecret(vmWith({ spice: { port: 5910 } }, 'Stopped'))).toBe(false);
  });

  it('locks the console: a random password that expires now, labelled and owned like VM-Operator', () => {
    const vm = vmWith({ spice: { port: 5910 } });
    const one = generatedDisplaySecret(vm);
    const two = generatedDisplaySecret(vm);
    expect(one.metadata).toMatchObject({
      name: 'test-vm-display-secret',
      labels: {
        'app.kubernetes.io/name': 'vm-runner',
        'app.kubernetes.io/component': 'display-secret',
        'app.kubernetes.io/instance': 'test-vm',
      },
      ownerReferences: [expect.objectContaining({ kind: 'VirtualMachine', uid: 'vm-uid' })],
    });
    expect(decode(one.data?.['password-expiry'])).toBe('now');
    expect(decode(one.data?.['display-password'])).toHaveLength(24);
    expect(one.data?.['display-password']).not.toBe(two.data?.['display-password']);
  });

  it("prefers the user's own Secret to the generated one", () => {
    const vm = vmWith({ spice: { port: 5910 } });
    const generated = generatedDisplaySecret(vm);
    const users = { metadata: { name: 'zz-my-secret' } };
    expect(chooseDisplaySecret([generated, users])).toBe(users);
    expect(chooseDisplaySecret([generated])).toBe(generated);
    expect(chooseDisplaySecret([])).toBeUndefined();
  });
});
