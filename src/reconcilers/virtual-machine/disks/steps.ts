// The VM's disks (plan.ts planned them): imports into new claims, the claims a runner pod waits
// for, hot-plugged disks and their helper pods, and claims that grow.
import { mergePatch } from '../../../kube/merge-patch.js';
import type { ObjectEvent } from '../../events.js';
import { carryOutAttachments } from './attachment-writes.js';
import { carryOutImports } from './import-writes.js';
import { desiredImporterPod } from './importer-pod.js';
import { createClaims } from '../runner-pod/writes.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const diskImportsStep: Step<VmState> = {
  name: 'disk imports',
  owned: true,
  async run({ seen, plan, io }) {
    const events: ObjectEvent[] = [];
    const writes = await carryOutImports(io.clients, seen.namespace, plan.imports, {
      importerPod: (disk) =>
        desiredImporterPod(seen.vm, disk, io.options.defaultRunnerImage, io.options.importDestinations?.()),
      recordEvent: async (event) => void events.push(event),
    });
    return { writes, events };
  },
};

export const runnerClaimsStep: Step<VmState> = {
  name: 'runner pod claims',
  owned: true,
  run: async ({ seen, plan, io }) => ({
    writes: await createClaims(io.clients, seen.namespace, plan.claimsToMake),
  }),
};

export const diskAttachmentsStep: Step<VmState> = {
  name: 'hot-plugged disks',
  owned: true,
  run: async ({ seen, plan, io }) => ({
    writes: await carryOutAttachments(
      io.clients,
      seen.vm,
      plan.attachments,
      io.options.defaultRunnerImage,
      io.options.runnerNetworkPolicy?.enabled ?? false,
    ),
  }),
};

/** Asks for more room on a disk's claim (its StorageClass allows it: sizes.ts). */
export const diskExpansionStep: Step<VmState> = {
  name: 'disk expansion',
  owned: true,
  async run({ seen, plan, io }) {
    const writes: string[] = [];
    for (const { claim, storage } of plan.diskSizes.expand) {
      await io.clients.core.patchNamespacedPersistentVolumeClaim(
        { name: claim, namespace: seen.namespace, body: { spec: { resources: { requests: { storage } } } } },
        mergePatch,
      );
      writes.push(`PersistentVolumeClaim ${claim} (grows to ${storage})`);
    }
    return { writes };
  },
};
