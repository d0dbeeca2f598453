// Pods as vmop makes them for a VM or an image, as far as the managers read them to give a
// namespace's runners and importers their Redis keys (operator/tenant-keys.ts).
import type { V1Pod } from '@kubernetes/client-node';
import { SNAPSHOT_SUFFIX_ENV, snapshotSuffixOf } from '../../src/api/runner-snapshot.js';
import { IMPORTER_COMPONENT } from '../../src/reconcilers/virtual-machine/disks/importer-pod.js';
import {
  imageLabels,
  LABEL_COMPONENT,
  LABEL_VOLUME,
  vmLabels,
} from '../../src/reconcilers/virtual-machine/naming.js';
import { RUNNER_COMPONENT } from '../../src/reconcilers/virtual-machine/runner-pod/pod.js';

/** A runner pod of VM `vm`; a migration's target (`target`) publishes under its own key. */
export function runnerPod(namespace: string, vm: string, name: string, target = false): V1Pod {
  return {
    metadata: { name, namespace, labels: { ...vmLabels(vm), [LABEL_COMPONENT]: RUNNER_COMPONENT } },
    spec: {
      containers: [
        { name: 'runner', env: target ? [{ name: SNAPSHOT_SUFFIX_ENV, value: snapshotSuffixOf(name) }] : [] },
      ],
    },
  };
}

/** The importer pod of a VM's disk (`owner.vm`) or an image's (`owner.image`). */
export function importerPod(
  namespace: string,
  owner: { vm?: string; image?: string },
  volume: string,
): V1Pod {
  const labels = owner.image ? imageLabels(owner.image) : vmLabels(owner.vm!);
  return {
    metadata: {
      name: `${owner.image ?? owner.vm}-import-${volume}`,
      namespace,
      labels: { ...labels, [LABEL_COMPONENT]: IMPORTER_COMPONENT, [LABEL_VOLUME]: volume },
    },
    spec: { containers: [{ name: 'importer' }] },
  };
}
