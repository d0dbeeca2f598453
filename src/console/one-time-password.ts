// A one-time SPICE password for one console session (VM-Operator's "passwordValidity"): written
// into the VM's display Secret with a short expiry; the runner sets it in qemu and counts it in
// status.displayPasswordSerial, so the caller knows when it works.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { CoreV1Api, CustomObjectsApi, type V1Secret } from '@kubernetes/client-node';
import { VirtualMachine } from '../api/virtual-machine.js';
import { chooseDisplaySecret } from '../reconcilers/virtual-machine/runner-config/display-secret.js';
import { displaySecretSelector, vmApiRef } from '../reconcilers/virtual-machine/naming.js';
import { mergePatch } from '../kube/merge-patch.js';

export interface OneTimePasswordOptions {
  core: CoreV1Api;
  customObjects: CustomObjectsApi;
  namespace: string;
  vm: VirtualMachine;
  /** Seconds the password is valid after the runner set it. */
  validitySeconds: number;
  timeoutMs: number;
}

/** The VM's display Secret (the user's own before the generated one), if any. */
export async function displaySecretOf(
  core: CoreV1Api,
  namespace: string,
  vmName: string,
): Promise<V1Secret | undefined> {
  const secrets = await core.listNamespacedSecret({
    namespace,
    labelSelector: displaySecretSelector(vmName),
  });
  return chooseDisplaySecret(secrets.items);
}

/** Sets a fresh password and resolves with it once the runner has applied it. */
export async function setOneTimePassword(options: OneTimePasswordOptions, secret: V1Secret): Promise<string> {
  const { core, customObjects, namespace, vm } = options;
  const name = vm.metadata.name;
  const before = vm.status?.displayPasswordSerial ?? 0;
  const password = randomBytes(12).toString('base64url');
  await core.patchNamespacedSecret(
    {
      name: secret.metadata!.name!,
      namespace,
      body: {
        stringData: { 'display-password': password, 'password-expiry': `+${options.validitySeconds}` },
      },
    },
    mergePatch,
  );
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    const current = VirtualMachine.parse(
      await customObjects.getNamespacedCustomObject(vmApiRef(namespace, name)),
    );
    if ((current.status?.displayPasswordSerial ?? 0) > before) return password;
    if (Date.now() > deadline) {
      throw new Error(
        `the runner of ${name} did not apply the new display password within ${options.timeoutMs / 1000} s`,
      );
    }
    await sleep(250);
  }
}
