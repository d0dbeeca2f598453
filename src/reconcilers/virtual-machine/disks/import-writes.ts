// The writes of a VM's disk imports (the decisions are imports.ts's): claims to import into,
// importer pods, claims marked imported, Events, importer pods that go.
import { type V1Pod } from '@kubernetes/client-node';
import { sourceName } from '../../../api/import-progress.js';
import { deletePodByUid, type KubeClients, createUnlessExists } from '../../../kube/clients.js';
import type { ObjectEvent } from '../../events.js';
import type { DiskImports, ImportDisk } from './imports.js';
import { IMPORTED_ANNOTATION } from '../naming.js';
import { mergePatch } from '../../../kube/merge-patch.js';

/** Carries out `plan`; returns what was written, for the log. */
export async function carryOutImports(
  clients: KubeClients,
  namespace: string,
  plan: DiskImports,
  options: { importerPod: (disk: ImportDisk) => V1Pod; recordEvent: (event: ObjectEvent) => Promise<void> },
): Promise<string[]> {
  const done: string[] = [];
  for (const claim of plan.createClaims) {
    const body = claim.desired;
    if (
      await createUnlessExists(() => clients.core.createNamespacedPersistentVolumeClaim({ namespace, body }))
    )
      done.push(`PersistentVolumeClaim ${claim.claimName} (to import into)`);
  }
  for (const disk of plan.startImports) {
    const body = options.importerPod(disk);
    if (!(await createUnlessExists(() => clients.core.createNamespacedPod({ namespace, body })))) continue;
    done.push(`Pod ${body.metadata!.name} (imports ${disk.volume})`);
    await options.recordEvent({
      type: 'Normal',
      reason: 'ImportStarted',
      message: `disk ${disk.volume}: importing ${sourceName(disk.source)} into claim ${disk.claimName}`,
    });
  }
  for (const { claim, digest } of plan.markImported) {
    await clients.core.patchNamespacedPersistentVolumeClaim(
      { name: claim, namespace, body: { metadata: { annotations: { [IMPORTED_ANNOTATION]: digest } } } },
      mergePatch,
    );
    done.push(`PersistentVolumeClaim ${claim} (imported)`);
  }
  for (const { volume, outcome, seconds } of plan.ended) {
    const failed = outcome.result === 'Failed';
    await options.recordEvent({
      type: failed ? 'Warning' : 'Normal',
      reason: failed ? 'ImportFailed' : 'Imported',
      message: `disk ${volume}: ${outcome.message}`,
      ...(seconds !== undefined && { durationSeconds: seconds }),
    });
  }
  for (const stale of plan.deletePods) {
    const { name: podName, uid } = stale.metadata!;
    if (await deletePodByUid(clients.core, { name: podName!, namespace, uid: uid! }))
      done.push(`Pod ${podName} (deleted)`);
  }
  return done;
}
