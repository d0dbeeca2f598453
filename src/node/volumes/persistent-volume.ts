// The PersistentVolumes the agent provisions for its pods' claims, and where a bound PV's data
// lives on this host. Pure.
import path from 'node:path';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { parseMemorySize } from '../../api/runner-config.js';
import { HOSTNAME_LABEL } from '../node-object.js';

/** Marks the PVs an agent provisioned (value: the node name). */
export const PROVISIONED_BY_LABEL = 'vmop.jdrupes.org/provisioned-by';

export type VolumeMode = 'Block' | 'Filesystem';

export function volumeModeOf(object: V1PersistentVolumeClaim | V1PersistentVolume): VolumeMode {
  return object.spec?.volumeMode === 'Block' ? 'Block' : 'Filesystem';
}

/**
 * A claim the agent provisions: still pending, and neither naming a PV, selecting PVs by label
 * (those are for the PV controller to bind to PVs made for them) nor asking for a data source.
 */
export function needsProvisioning(claim: V1PersistentVolumeClaim): boolean {
  const spec = claim.spec ?? {};
  return (
    claim.status?.phase !== 'Bound' &&
    !spec.volumeName &&
    !spec.selector &&
    !spec.dataSource &&
    !spec.dataSourceRef &&
    !claim.metadata?.deletionTimestamp
  );
}

export function provisionedVolumeName(claim: V1PersistentVolumeClaim): string {
  return `vmop-local-${claim.metadata!.uid!}`;
}

/** Block volumes are sparse image files, Filesystem volumes directories, both below `volumesDir`. */
export function provisionedBackingPath(volumesDir: string, claim: V1PersistentVolumeClaim): string {
  const name = provisionedVolumeName(claim);
  return path.join(volumesDir, volumeModeOf(claim) === 'Block' ? `${name}.img` : name);
}

/** The requested size in bytes, or an error message. */
export function requestedBytes(claim: V1PersistentVolumeClaim): number | string {
  const storage = claim.spec?.resources?.requests?.storage;
  if (storage === undefined) return 'the claim requests no storage size';
  const bytes = parseMemorySize(String(storage));
  return bytes === undefined ? `cannot read the storage request ${JSON.stringify(storage)}` : bytes;
}

/**
 * A `local` PV on this node (whose hostname label is its name), pre-bound to the claim (the PV controller completes the binding),
 * matching the claim's mode, access modes and class. Retained when the claim goes: disks are precious.
 */
export function desiredPersistentVolume(
  claim: V1PersistentVolumeClaim,
  nodeName: string,
  backingPath: string,
): V1PersistentVolume {
  const spec = claim.spec ?? {};
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name: provisionedVolumeName(claim), labels: { [PROVISIONED_BY_LABEL]: nodeName } },
    spec: {
      capacity: { storage: String(spec.resources!.requests!.storage) },
      accessModes: spec.accessModes ?? ['ReadWriteOnce'],
      volumeMode: volumeModeOf(claim),
      ...(spec.storageClassName && { storageClassName: spec.storageClassName }),
      persistentVolumeReclaimPolicy: 'Retain',
      claimRef: {
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        namespace: claim.metadata!.namespace!,
        name: claim.metadata!.name!,
        uid: claim.metadata!.uid!,
      },
      local: { path: backingPath },
      nodeAffinity: {
        required: {
          nodeSelectorTerms: [
            { matchExpressions: [{ key: HOSTNAME_LABEL, operator: 'In', values: [nodeName] }] },
          ],
        },
      },
    },
  };
}

/** Where a PV's data is on this host: its `local` or `hostPath` path. */
export function backingPathOf(volume: V1PersistentVolume): string | undefined {
  return volume.spec?.local?.path ?? volume.spec?.hostPath?.path;
}
