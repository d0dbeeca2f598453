// The Redis keys a namespace's runners and importers may write (api/tenant-redis.ts), derived
// from the pods vmop made there (their managed-by label is the manager's alone: the owned-labels
// policy): a runner pod writes its VM's snapshot (a migration target its own, `…@pod`) and usage
// history, an importer pod its disk's progress. Pure.
import type { V1Pod } from '@kubernetes/client-node';
import { importProgressRedisKey } from '../api/import-progress.js';
import { snapshotRedisKey } from '../api/runner-snapshot.js';
import type { TenantKeys } from '../api/tenant-redis.js';
import { imageKey } from '../api/virtual-machine-image.js';
import { usageHistoryKey } from '../api/vm-usage-history.js';
import { isImporterPod } from '../reconcilers/virtual-machine/disks/importer-pod.js';
import { snapshotSuffixOfPod } from '../reconcilers/virtual-machine/migration/target.js';
import {
  LABEL_COMPONENT,
  LABEL_IMAGE,
  LABEL_INSTANCE,
  LABEL_MANAGED_BY,
  LABEL_VOLUME,
  MANAGED_BY,
  vmKey,
} from '../reconcilers/virtual-machine/naming.js';
import { RUNNER_COMPONENT } from '../reconcilers/virtual-machine/runner-pod/pod.js';

export function tenantKeysOf(namespace: string, pods: V1Pod[]): TenantKeys {
  const runner = new Set<string>();
  const importer = new Set<string>();
  for (const pod of pods) {
    const labels = pod.metadata?.labels ?? {};
    if (pod.metadata?.namespace !== namespace || labels[LABEL_MANAGED_BY] !== MANAGED_BY) continue;
    const vm = labels[LABEL_INSTANCE];
    // A runner pod of vmop 0.1 (a StatefulSet's, adopted) has no component label.
    const component = labels[LABEL_COMPONENT];
    if (vm && (component === RUNNER_COMPONENT || component === undefined)) {
      runner.add(snapshotRedisKey(vmKey(namespace, vm), snapshotSuffixOfPod(pod)));
      runner.add(usageHistoryKey(vmKey(namespace, vm)));
    } else if (isImporterPod(pod) && labels[LABEL_VOLUME]) {
      const owner = labels[LABEL_IMAGE]
        ? imageKey(namespace, labels[LABEL_IMAGE])
        : vm && vmKey(namespace, vm);
      if (owner) importer.add(importProgressRedisKey(owner, labels[LABEL_VOLUME]));
    }
  }
  return { runner: [...runner].sort(), importer: [...importer].sort() };
}
