// The display Secret vmop generates for a SPICE VM that has none, so a new VM's console is
// locked (VM-Operator's spice.generateSecret, default true). Pure builders; the reconciler writes.
import { randomBytes } from 'node:crypto';
import type { V1Secret } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { LABEL_COMPONENT, ownerReference, vmLabels } from '../naming.js';

/** Marks a display Secret as vmop's own, so one the user makes later is preferred to it. */
export const GENERATED_ANNOTATION = 'vmoperator.jdrupes.org/generated';

export function generatedDisplaySecretName(vmName: string): string {
  return `${vmName}-display-secret`;
}

/**
 * Whether the VM wants a generated display Secret: it has SPICE and does not opt out, or VNC (which
 * is always locked), and is to run.
 * A stopped VM has no console to lock; its Secret is made when it first starts (and then kept),
 * which spares a write and a cached object for every VM created stopped.
 */
export function wantsGeneratedDisplaySecret(vm: VirtualMachine): boolean {
  const { spice, vnc } = vm.spec.vm.display;
  return (spice?.generateSecret === true || vnc !== undefined) && vm.spec.vm.state === 'Running';
}

/**
 * A random password that expires at once ("now"): nobody can connect until someone sets a
 * password (e.g. a one-time one for a console session).
 */
export function generatedDisplaySecret(
  vm: VirtualMachine,
  password = randomBytes(18).toString('base64url'),
): V1Secret {
  const encode = (text: string) => Buffer.from(text).toString('base64');
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: generatedDisplaySecretName(vm.metadata.name),
      namespace: vm.metadata.namespace,
      labels: { ...vmLabels(vm.metadata.name), [LABEL_COMPONENT]: 'display-secret' },
      annotations: { [GENERATED_ANNOTATION]: 'true' },
      ownerReferences: [ownerReference(vm)],
    },
    type: 'Opaque',
    data: { 'display-password': encode(password), 'password-expiry': encode('now') },
  };
}

/** The display Secret to use: the user's own before the generated one, then by name. */
export function chooseDisplaySecret(secrets: V1Secret[]): V1Secret | undefined {
  const generated = (s: V1Secret) => (s.metadata?.annotations?.[GENERATED_ANNOTATION] === 'true' ? 1 : 0);
  return [...secrets].sort(
    (a, b) => generated(a) - generated(b) || a.metadata!.name!.localeCompare(b.metadata!.name!),
  )[0];
}

/**
 * A SPICE display without a password is open to whoever reaches its port (the runner pods' host
 * network): refused unless an admin allows it (`--allow-display-without-password`).
 */
export function displayPasswordErrors(
  vm: VirtualMachine,
  hasDisplaySecret: boolean,
  allowed: boolean,
): string[] {
  const spice = vm.spec.vm.display.spice;
  if (!spice || spice.generateSecret || hasDisplaySecret || allowed) return [];
  return [
    "spec.vm.display.spice.generateSecret: false and no display Secret: the display would have no password, open to every pod that reaches the runner pod (and, with a tap network, to the node's network); set generateSecret: true, provide a display Secret, or ask an admin to allow displays without a password (the chart's display.allowWithoutPassword)",
  ];
}
