// What a VirtualMachineClone needs (pure): the new VM, made from its snapshot's record of the
// original, with the disks filled from the snapshot's copies and nothing that made the original
// itself: no MAC, machine UUID, address or pool; its runner data (TPM, UEFI variables, UUID) is new.
import type { KubernetesObject } from '@kubernetes/client-node';
import { API_VERSION, KIND, VirtualMachineSpec } from '../../api/virtual-machine.js';
import { isCloneDone, type CloneStatus, type VirtualMachineClone } from '../../api/virtual-machine-clone.js';
import { provisioningSecretName, type VirtualMachineSnapshot } from '../../api/virtual-machine-snapshot.js';
import type { SecretCopy } from '../secret-copies.js';
import { diskVolumeName } from '../virtual-machine/naming.js';

/** On a VM a clone made: the clone's uid (so that a second look knows it made the VM). */
export const CLONED_BY_ANNOTATION = 'vmoperator.jdrupes.org/cloned-by';
/** On a VM a clone made: the snapshot it was made from. */
export const CLONED_FROM_ANNOTATION = 'vmoperator.jdrupes.org/cloned-from';

export interface ClonePlan {
  status: CloneStatus;
  /** The VM to create. */
  create?: KubernetesObject & { spec: VirtualMachineSpec };
  /** The new VM's provisioning Secrets, copied from the snapshot's before it is made; the VM owns them. */
  secrets: SecretCopy[];
}

/** The new VM's copies of the snapshot's provisioning Secrets. */
const secretCopies = (snapshot: VirtualMachineSnapshot | undefined, newName: string): SecretCopy[] =>
  (snapshot?.status?.virtualMachine?.secrets ?? []).map((secret) => ({
    from: secret.copyName,
    to: provisioningSecretName(newName, secret.field),
  }));

type Spec = VirtualMachineSpec;

/** The original's spec as the clone gets it. */
export function cloneSpec(
  snapshot: VirtualMachineSnapshot,
  newName: string,
  state?: 'Running' | 'Stopped',
): Spec {
  const recorded = VirtualMachineSpec.parse(snapshot.status?.virtualMachine?.spec ?? {});
  // The snapshot's copies of its Secrets become the clone's own (named after it).
  const secretOf = (field: 'cloudInit' | 'sysprep') =>
    snapshot.status?.virtualMachine?.secrets?.some((secret) => secret.field === field)
      ? { secretRef: { name: provisioningSecretName(newName, field) } }
      : {};
  const originalName = snapshot.spec.virtualMachineName;
  const copies = new Map(
    (snapshot.status?.volumes ?? []).map((volume) => [volume.name, volume.copyClaimName]),
  );
  const { machineUuid: _uuid, virtualMachineIPAddressName: _address, ...vm } = recorded.vm;
  const metaData = recorded.cloudInit?.metaData;
  return {
    ...recorded,
    pools: [],
    ...(recorded.sysprep && { sysprep: { ...recorded.sysprep, ...secretOf('sysprep') } }),
    ...(recorded.cloudInit && {
      cloudInit: {
        ...recorded.cloudInit,
        ...secretOf('cloudInit'),
        // The default hostname is the VM's name; one set to the original's name becomes the clone's.
        ...(metaData?.['local-hostname'] === originalName && {
          metaData: { ...metaData, 'local-hostname': newName },
        }),
      },
    }),
    vm: {
      ...vm,
      ...(state && { state }),
      networks: vm.networks?.map((network) => {
        if (!network.tap) return network;
        const { mac: _mac, ...tap } = network.tap;
        return { ...network, tap };
      }),
      disks: vm.disks?.map((disk, index) => {
        const copy = disk.volumeClaimTemplate && copies.get(diskVolumeName(disk, index));
        return copy ? { ...disk, source: { pvc: { name: copy } } } : disk;
      }),
    },
  } as Spec;
}

export function planClone(input: {
  clone: VirtualMachineClone;
  snapshot?: VirtualMachineSnapshot;
  /** The VM of the new name, if one exists. */
  existing?: KubernetesObject;
  now: Date;
}): ClonePlan {
  const { clone, snapshot, existing } = input;
  const status = clone.status ?? {};
  const { virtualMachineSnapshotName: snapshotName, newVirtualMachineName: newName } = clone.spec;
  const secrets = secretCopies(snapshot, newName);
  const pending = (message: string): ClonePlan => ({
    status: { ...status, phase: 'Pending', message },
    secrets: [],
  });
  const completed = (): ClonePlan => ({
    secrets,
    status: {
      ...status,
      phase: 'Completed',
      completedAt: status.completedAt ?? input.now.toISOString(),
      message: `VirtualMachine ${newName} made from snapshot ${snapshotName}; keep the snapshot until its disks are imported`,
    },
  });
  if (isCloneDone(clone)) return { status, secrets: [] };
  if (existing)
    return existing.metadata?.annotations?.[CLONED_BY_ANNOTATION] === clone.metadata.uid
      ? completed()
      : {
          status: { ...status, phase: 'Failed', message: `a VirtualMachine ${newName} exists already` },
          secrets: [],
        };
  if (!snapshot) return pending(`VirtualMachineSnapshot ${snapshotName} does not exist`);
  if (snapshot.status?.phase === 'Failed')
    return {
      status: { ...status, phase: 'Failed', message: `snapshot ${snapshotName} failed: nothing to clone` },
      secrets: [],
    };
  if (snapshot.status?.phase !== 'Ready')
    return pending(`snapshot ${snapshotName} is not Ready yet (${snapshot.status?.phase ?? 'Pending'})`);
  const { labels } = snapshot.status.virtualMachine ?? {};
  return {
    ...completed(),
    create: {
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: {
        name: newName,
        namespace: clone.metadata.namespace,
        ...(labels && { labels }),
        annotations: { [CLONED_BY_ANNOTATION]: clone.metadata.uid!, [CLONED_FROM_ANNOTATION]: snapshotName },
      },
      spec: cloneSpec(snapshot, newName, clone.spec.state),
    },
  };
}
