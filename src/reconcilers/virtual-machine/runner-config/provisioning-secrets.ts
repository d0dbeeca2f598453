// Checks the Secrets a VM's provisioning names (pure): they exist and have the keys the runner
// reads. Only key names are looked at; values never leave the Secret (the runner gets them as files).
import type { V1Secret } from '@kubernetes/client-node';
import { CLOUD_INIT_SECRET_KEYS, SYSPREP_FILES } from '../../../api/provisioning.js';
import type { VirtualMachine } from '../../../api/virtual-machine.js';

/** A named Secret as read: the object, or null when it does not exist. */
export interface ProvisioningSecrets {
  cloudInit?: V1Secret | null;
  sysprep?: V1Secret | null;
}

/** The Secrets the VM names, for the reconciler to read. */
export function provisioningSecretNames(vm: VirtualMachine): { cloudInit?: string; sysprep?: string } {
  return { cloudInit: vm.spec.cloudInit?.secretRef?.name, sysprep: vm.spec.sysprep?.secretRef.name };
}

function check(
  path: string,
  name: string | undefined,
  secret: V1Secret | null | undefined,
  keys: readonly string[],
): string[] {
  if (!name) return [];
  if (!secret) return [`${path}: Secret "${name}" not found`];
  const has = Object.keys({ ...secret.data, ...secret.stringData });
  if (keys.some((key) => has.includes(key))) return [];
  return [
    `${path}: Secret "${name}" has none of the keys ${keys.join(', ')} (it has: ${has.join(', ') || 'none'})`,
  ];
}

export function provisioningSecretErrors(vm: VirtualMachine, secrets: ProvisioningSecrets): string[] {
  const names = provisioningSecretNames(vm);
  return [
    ...check('spec.cloudInit.secretRef', names.cloudInit, secrets.cloudInit, CLOUD_INIT_SECRET_KEYS.userData),
    ...check('spec.sysprep.secretRef', names.sysprep, secrets.sysprep, SYSPREP_FILES),
  ];
}
