// `vmop vm snapshot NAME`, `vmop vm restore NAME --snapshot S` and `vmop vm clone NAME --name NEW`:
// make a VirtualMachineSnapshot, VirtualMachineRestore or VirtualMachineClone and follow it.
import type { CustomObjectsApi } from '@kubernetes/client-node';
import { API_VERSION, GROUP, PLURAL, VERSION } from '../api/virtual-machine.js';
import { isNotFound } from '../kube/clients.js';
import {
  SNAPSHOT_KIND,
  SNAPSHOT_PLURAL,
  VirtualMachineSnapshot,
  isSnapshotDone,
} from '../api/virtual-machine-snapshot.js';
import {
  RESTORE_KIND,
  RESTORE_PLURAL,
  VirtualMachineRestore,
  isRestoreDone,
} from '../api/virtual-machine-restore.js';
import { CLONE_KIND, CLONE_PLURAL, VirtualMachineClone, isCloneDone } from '../api/virtual-machine-clone.js';
import { fail } from './failure.js';
import { phaseAndMessage, pollUntil } from './follow-status.js';

export interface SnapshotCliOptions {
  /** The snapshot's name; `<vm>-<random>` when absent. */
  name?: string;
  allowCrashConsistent?: boolean;
  wait?: boolean;
  timeout: number;
}

export interface RestoreCliOptions {
  snapshot: string;
  stop?: boolean;
  wait?: boolean;
  timeout: number;
}

/** Polls `read` until `done`, then fails with its message when it failed, else prints `summary`. */
async function follow<T extends { status?: { phase?: string; message?: string } }>(
  name: string,
  read: () => Promise<T>,
  done: (object: T) => boolean,
  summary: (object: T) => string,
  timeoutMs: number,
): Promise<void> {
  const object = await pollUntil(name, read, done, timeoutMs);
  if (object.status?.phase === 'Failed') fail(phaseAndMessage(name, object));
  console.log(`${name}: ${summary(object)}`);
}

/**
 * Fails at once, naming it, when what a request names does not exist: the object made for it
 * would only wait (Pending) for it, and `--wait` with it.
 */
export async function mustExist(
  api: CustomObjectsApi,
  namespace: string,
  plural: string,
  name: string,
  what: string,
) {
  try {
    return (await api.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      plural,
      namespace,
      name,
    })) as {
      status?: { phase?: string; message?: string };
    };
  } catch (err) {
    if (isNotFound(err)) fail(`${what} ${namespace}/${name} does not exist`);
    throw err;
  }
}

/** A snapshot to restore or clone from: it must exist and not have failed. */
async function usableSnapshot(api: CustomObjectsApi, namespace: string, name: string) {
  const { status } = await mustExist(api, namespace, SNAPSHOT_PLURAL, name, 'VirtualMachineSnapshot');
  if (status?.phase === 'Failed')
    fail(
      `VirtualMachineSnapshot ${namespace}/${name} failed${status.message ? ` (${status.message})` : ''}: use another`,
    );
}

export interface CloneCliOptions {
  /** The new VM's name. */
  name: string;
  /** The snapshot to clone; without it the VM is snapshotted first. */
  snapshot?: string;
  start?: boolean;
  wait?: boolean;
  timeout: number;
}

export async function createSnapshot(
  api: CustomObjectsApi,
  namespace: string,
  vmName: string,
  options: SnapshotCliOptions,
): Promise<void> {
  await mustExist(api, namespace, PLURAL, vmName, 'VirtualMachine');
  const ref = { group: GROUP, version: VERSION, plural: SNAPSHOT_PLURAL, namespace };
  const created = VirtualMachineSnapshot.parse(
    await api.createNamespacedCustomObject({
      ...ref,
      body: {
        apiVersion: API_VERSION,
        kind: SNAPSHOT_KIND,
        metadata: options.name ? { name: options.name } : { generateName: `${vmName}-` },
        spec: {
          virtualMachineName: vmName,
          ...(options.allowCrashConsistent && { requiredConsistency: false }),
        },
      },
    }),
  );
  const name = created.metadata.name;
  console.log(`virtualmachinesnapshot/${name} created (of ${namespace}/${vmName})`);
  if (!options.wait) return;
  await follow(
    name,
    async () => VirtualMachineSnapshot.parse(await api.getNamespacedCustomObject({ ...ref, name })),
    isSnapshotDone,
    ({ status }) => `${status?.phase}, consistency ${status?.consistency}, ${status?.size ?? 'size unknown'}`,
    options.timeout,
  );
}

export async function createRestore(
  api: CustomObjectsApi,
  namespace: string,
  vmName: string,
  options: RestoreCliOptions,
): Promise<void> {
  await mustExist(api, namespace, PLURAL, vmName, 'VirtualMachine');
  await usableSnapshot(api, namespace, options.snapshot);
  const ref = { group: GROUP, version: VERSION, plural: RESTORE_PLURAL, namespace };
  const created = VirtualMachineRestore.parse(
    await api.createNamespacedCustomObject({
      ...ref,
      body: {
        apiVersion: API_VERSION,
        kind: RESTORE_KIND,
        metadata: { generateName: `${vmName}-restore-` },
        spec: {
          virtualMachineName: vmName,
          virtualMachineSnapshotName: options.snapshot,
          ...(options.stop && { stopVirtualMachine: true }),
        },
      },
    }),
  );
  const name = created.metadata.name;
  console.log(
    `virtualmachinerestore/${name} created (${namespace}/${vmName} from snapshot ${options.snapshot})`,
  );
  if (!options.wait) return;
  await follow(
    name,
    async () => VirtualMachineRestore.parse(await api.getNamespacedCustomObject({ ...ref, name })),
    isRestoreDone,
    ({ status }) => `${status?.phase}${status?.message ? `: ${status.message}` : ''}`,
    options.timeout,
  );
}

/** A new VM from a snapshot, or from `vmName` through a snapshot taken first. */
export async function createClone(
  api: CustomObjectsApi,
  namespace: string,
  vmName: string,
  options: CloneCliOptions,
): Promise<void> {
  const snapshotName = options.snapshot ?? `${options.name}-source`;
  if (options.snapshot) await usableSnapshot(api, namespace, options.snapshot);
  else
    await createSnapshot(api, namespace, vmName, {
      name: snapshotName,
      wait: true,
      timeout: options.timeout,
    });
  const ref = { group: GROUP, version: VERSION, plural: CLONE_PLURAL, namespace };
  const created = VirtualMachineClone.parse(
    await api.createNamespacedCustomObject({
      ...ref,
      body: {
        apiVersion: API_VERSION,
        kind: CLONE_KIND,
        metadata: { generateName: `${options.name}-clone-` },
        spec: {
          virtualMachineSnapshotName: snapshotName,
          newVirtualMachineName: options.name,
          ...(options.start && { state: 'Running' }),
        },
      },
    }),
  );
  const name = created.metadata.name;
  console.log(
    `virtualmachineclone/${name} created (${namespace}/${options.name} from snapshot ${snapshotName})`,
  );
  if (!options.wait) return;
  await follow(
    name,
    async () => VirtualMachineClone.parse(await api.getNamespacedCustomObject({ ...ref, name })),
    isCloneDone,
    ({ status }) => `${status?.phase}${status?.message ? `: ${status.message}` : ''}`,
    options.timeout,
  );
}
