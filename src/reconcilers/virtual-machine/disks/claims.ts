// The PersistentVolumeClaims a VM's runner pod uses (pure): its runner data and one per disk with a
// volumeClaimTemplate. Names as VM-Operator gives them since 3.4 (`<vm>-runner-data`,
// `<vm>-<disk>`), and the claims the StatefulSet of vmop 0.1 (and VM-Operator before 3.4) made
// (`runner-data-<vm>-0`, `<disk>-<vm>-0`) are used as they are, so no disk's data moves on an upgrade.
// Claims carry no owner: deleting the VM keeps them.
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import {
  IMPORT_SOURCE_ANNOTATION,
  LABEL_VOLUME,
  RUNNER_DATA_CLAIM,
  diskVolumeName,
  sourceDigest,
  vmLabels,
} from '../naming.js';
import { LABEL_MIGRATION } from '../migration/request.js';

export interface RunnerClaim {
  /** The pod's volume name; a disk's is also its device path in the runner, /dev/<volume>. */
  volume: string;
  claimName: string;
  /** The claim as vmop makes it when it does not exist yet. */
  desired: V1PersistentVolumeClaim;
  /** Whether a claim of that name exists (per the cache). */
  exists: boolean;
  block: boolean;
}

type Quantities = Record<string, string | number> | undefined;

/** Kubernetes wants quantities as strings in typed objects; the CRD also admits integers. */
export function quantityStrings(values: Quantities): Record<string, string> | undefined {
  return values && Object.fromEntries(Object.entries(values).map(([key, value]) => [key, String(value)]));
}

export function resourceRequirements(resources: { limits?: Quantities; requests?: Quantities }) {
  return {
    ...(resources.limits && { limits: quantityStrings(resources.limits) }),
    ...(resources.requests && { requests: quantityStrings(resources.requests) }),
  };
}

/** The names a volume's claim may have: the one vmop makes, and the StatefulSet's of old. */
export const claimNames = (vmName: string, volume: string) => ({
  current: `${vmName}-${volume}`,
  legacy: `${volume}-${vmName}-0`,
});

/**
 * Which claim backs `volume`: one labelled for it (the claim a migration made is labelled so), else
 * the StatefulSet's of old, else the one vmop makes.
 */
function claimFor(vmName: string, volume: string, existing: V1PersistentVolumeClaim[]) {
  // A migration's target claims count once it succeeded (the label goes then).
  const live = existing.filter(
    (claim) => !claim.metadata?.deletionTimestamp && !claim.metadata?.labels?.[LABEL_MIGRATION],
  );
  const labelled = live.find((claim) => claim.metadata?.labels?.[LABEL_VOLUME] === volume);
  const names = claimNames(vmName, volume);
  const legacy = live.find((claim) => claim.metadata?.name === names.legacy);
  const name = labelled?.metadata?.name ?? legacy?.metadata?.name ?? names.current;
  return { name, exists: live.some((claim) => claim.metadata?.name === name) };
}

export interface RunnerClaimOptions {
  /** The StorageClass of new runner data claims (the default one when absent). */
  runnerDataStorageClass?: string;
  /** ReadWriteMany (on shared storage) lets a VM migrate live; ReadWriteOnce when absent. */
  runnerDataAccessMode?: 'ReadWriteOnce' | 'ReadWriteMany';
}

/**
 * The runner pod's claims for `vm`, given the claims of the VM that exist (listed by the VM's
 * labels). The runner data claim is first.
 */
export function runnerClaims(
  vm: VirtualMachine,
  existing: V1PersistentVolumeClaim[],
  options: RunnerClaimOptions = {},
): RunnerClaim[] {
  const vmName = vm.metadata.name;
  const namespace = vm.metadata.namespace;
  const claim = (
    volume: string,
    spec: V1PersistentVolumeClaim['spec'],
    extra: Partial<V1PersistentVolumeClaim['metadata']> = {},
  ) => {
    const { name, exists } = claimFor(vmName, volume, existing);
    const desired: V1PersistentVolumeClaim = {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      metadata: {
        ...extra,
        name,
        namespace,
        labels: { ...extra.labels, ...vmLabels(vmName), [LABEL_VOLUME]: volume },
      },
      spec,
    };
    return { volume, claimName: name, desired, exists, block: spec?.volumeMode === 'Block' };
  };
  // The runner's own state: machine uuid, firmware variables, TPM state, template copy, serial log.
  const runnerData = claim(RUNNER_DATA_CLAIM, {
    accessModes: [options.runnerDataAccessMode ?? 'ReadWriteOnce'],
    volumeMode: 'Filesystem',
    resources: { requests: { storage: '1Mi' } },
    ...(options.runnerDataStorageClass && { storageClassName: options.runnerDataStorageClass }),
  });
  const disks = vm.spec.vm.disks.flatMap((disk, index) => {
    const template = disk.volumeClaimTemplate;
    if (!template) return [];
    const { resources, ...claimSpec } = template.spec ?? {};
    return [
      claim(
        diskVolumeName(disk, index),
        {
          accessModes: ['ReadWriteOnce'],
          volumeMode: 'Block',
          ...claimSpec,
          ...(resources && { resources: resourceRequirements(resources) }),
        },
        {
          ...(template.metadata?.labels && { labels: template.metadata.labels }),
          // A claim made for a disk with a source is to be imported into (imports.ts).
          ...((template.metadata?.annotations || disk.source) && {
            annotations: {
              ...template.metadata?.annotations,
              ...(disk.source && { [IMPORT_SOURCE_ANNOTATION]: sourceDigest(disk.source) }),
            },
          }),
        },
      ),
    ];
  });
  return [runnerData, ...disks];
}
