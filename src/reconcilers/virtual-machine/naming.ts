// Names and labels that tie the objects of one VM together (as VM-Operator defines them).
import { createHash } from 'node:crypto';
import { GROUP, PLURAL, VERSION, type Disk, type ImportSource } from '../../api/virtual-machine.js';

export const APP_NAME = 'vm-runner';
export const MANAGED_BY = 'vm-operator';
export const FIELD_MANAGER = 'vmop';
export const CONFIG_DIR = '/etc/opt/vmrunner';
export const DATA_DIR = '/var/local/vm-data';
export const DISPLAY_SECRET_DIR = '/etc/opt/vmrunner/display-secret';
/** The cloud-init and sysprep Secrets (spec.cloudInit.secretRef, spec.sysprep.secretRef) in the runner. */
export const CLOUD_INIT_SECRET_DIR = '/etc/opt/vmrunner/cloud-init-secret';
export const SYSPREP_SECRET_DIR = '/etc/opt/vmrunner/sysprep-secret';
export const RUNNER_DATA_CLAIM = 'runner-data';
/** The runner pod's one container. */
export const RUNNER_CONTAINER = 'runner';
/** A namespace's shared CD and boot images (VM-Operator's convention), mounted read-only by runners. */
export const IMAGE_REPOSITORY_CLAIM = 'vmop-image-repository';
export { DEFAULT_IMAGE_REPOSITORY as IMAGE_REPOSITORY_DIR } from '../../api/runner-config.js';

/** On the runner pod: the versions of its config (ConfigMap/display Secret), VM-Operator's name. */
export const CONFIG_VERSION_ANNOTATION = 'vmrunner.jdrupes.org/cmVersion';
/** On the runner pod: when the manager last set CONFIG_VERSION_ANNOTATION. */
export const NUDGED_AT_ANNOTATION = 'vmoperator.jdrupes.org/config-nudged-at';

/**
 * On a VM: the VirtualMachineOperation in flight (one at a time). It tells the watch edge whom a
 * VM change concerns, and the reconciler that a runner pod went away on purpose.
 */
export const OPERATION_ANNOTATION = 'vmoperator.jdrupes.org/operation';
/** On a VM: the last Reset operation; the runner resets the guest when it changes. */
export const RESET_REQUEST_ANNOTATION = 'vmoperator.jdrupes.org/reset-request';
/** On a VM: the last Start or Restart operation; a new one resets the start back-off. */
export const START_REQUEST_ANNOTATION = 'vmoperator.jdrupes.org/start-request';
/** On the runner pod (from its template): the VM spec the pod was made for, as JSON. */
export const POD_SPEC_ANNOTATION = 'vmoperator.jdrupes.org/pod-spec';

/** On a claim vmop made for a VM: which of the runner pod's volumes it backs (runner-data, <disk>). */
export const LABEL_VOLUME = 'vmoperator.jdrupes.org/volume';

/** On a claim vmop made to import a disk's source into, and on its importer pod: sourceDigest(). */
export const IMPORT_SOURCE_ANNOTATION = 'vmoperator.jdrupes.org/import-source';
/** On a claim: the digest of the source imported into it (set once the import succeeded). */
export const IMPORTED_ANNOTATION = 'vmoperator.jdrupes.org/imported';

/** Tells disk sources apart: a changed URL or checksum is another import. */
export function sourceDigest(source: ImportSource): string {
  return createHash('sha256').update(JSON.stringify(source)).digest('hex').slice(0, 16);
}

export const LABEL_NAME = 'app.kubernetes.io/name';
export const LABEL_INSTANCE = 'app.kubernetes.io/instance';
export const LABEL_MANAGED_BY = 'app.kubernetes.io/managed-by';
export const LABEL_COMPONENT = 'app.kubernetes.io/component';

/** The labels every object (and PVC) of a VM carries. */
export function vmLabels(vmName: string): Record<string, string> {
  return { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: vmName, [LABEL_MANAGED_BY]: MANAGED_BY };
}

/** On the claim and importer pod of a VirtualMachineImage: the image's name. */
export const LABEL_IMAGE = 'vmoperator.jdrupes.org/image';

export function imageLabels(imageName: string): Record<string, string> {
  return { [LABEL_NAME]: APP_NAME, [LABEL_IMAGE]: imageName, [LABEL_MANAGED_BY]: MANAGED_BY };
}

/** On the claims and copying pods of a VirtualMachineSnapshot: the snapshot's name. */
export const LABEL_SNAPSHOT = 'vmoperator.jdrupes.org/snapshot';

export function snapshotLabels(snapshotName: string): Record<string, string> {
  return { [LABEL_NAME]: APP_NAME, [LABEL_SNAPSHOT]: snapshotName, [LABEL_MANAGED_BY]: MANAGED_BY };
}

/** On the snapshots a VirtualMachineSnapshotSchedule took: the schedule's name. */
export const LABEL_SCHEDULE = 'vmoperator.jdrupes.org/snapshot-schedule';
/** On a scheduled snapshot: the run (scheduled time) it was taken for, and the schedule's generation then. */
export const SCHEDULED_AT_ANNOTATION = 'vmoperator.jdrupes.org/scheduled-at';
export const SCHEDULE_GENERATION_ANNOTATION = 'vmoperator.jdrupes.org/schedule-generation';

/** On the copying pods of a VirtualMachineRestore: the restore's name. */
export const LABEL_RESTORE = 'vmoperator.jdrupes.org/restore';

export function restoreLabels(restoreName: string): Record<string, string> {
  return { [LABEL_NAME]: APP_NAME, [LABEL_RESTORE]: restoreName, [LABEL_MANAGED_BY]: MANAGED_BY };
}

/** On the pod, Service and token Secret of a VirtualMachineExport: the export's name. */
export const LABEL_EXPORT = 'vmoperator.jdrupes.org/export';

export function exportLabels(exportName: string): Record<string, string> {
  return { [LABEL_NAME]: APP_NAME, [LABEL_EXPORT]: exportName, [LABEL_MANAGED_BY]: MANAGED_BY };
}

/** The labels that make a Secret a VM's display-password Secret (its name is the user's choice). */
export function displaySecretLabels(vmName: string): Record<string, string> {
  return { [LABEL_NAME]: APP_NAME, [LABEL_COMPONENT]: 'display-secret', [LABEL_INSTANCE]: vmName };
}

export function displaySecretSelector(vmName: string): string {
  return Object.entries(displaySecretLabels(vmName))
    .map(([key, value]) => `${key}=${value}`)
    .join(',');
}

/**
 * The disk's volume name: `<metadata.name>-disk`, or `disk-<n>` with n the disk's index in the
 * disk list. It is also the device path in the runner (`/dev/<name>`) and the PVC name prefix.
 */
export function diskVolumeName(disk: Disk, index: number): string {
  const name = disk.volumeClaimTemplate?.metadata?.name;
  return name ? `${name}-disk` : `disk-${index}`;
}

/** The work-queue key of a VM. */
export function vmKey(namespace: string, name: string): string {
  return `vm:${namespace}/${name}`;
}

/** A VM as the custom objects API names it. */
export function vmApiRef(namespace: string, name: string) {
  return { group: GROUP, version: VERSION, plural: PLURAL, namespace, name };
}

export function parseVmKey(key: string): { namespace: string; name: string } {
  const match = /^vm:([^/]+)\/(.+)$/.exec(key);
  if (!match) throw new Error(`not a VirtualMachine key: ${key}`);
  return { namespace: match[1]!, name: match[2]! };
}

/** The owner reference to a VM (or another object of vmop's API, an image): garbage collection takes what it owns. */
export function ownerReference(owner: {
  apiVersion: string;
  kind: string;
  metadata: { name: string; uid?: string };
}) {
  return {
    apiVersion: owner.apiVersion,
    kind: owner.kind,
    name: owner.metadata.name,
    uid: owner.metadata.uid!,
    controller: true,
    blockOwnerDeletion: true,
  };
}
