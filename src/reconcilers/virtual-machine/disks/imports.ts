// Disks filled from a source before the VM first uses them (pure). A claim vmop makes for such a
// disk is marked with the source (IMPORT_SOURCE_ANNOTATION); an importer pod writes the source
// into it; once that pod succeeded the claim is marked imported (IMPORTED_ANNOTATION) and only
// then may a runner pod use it, so a half-written disk never boots. A claim that existed before
// (a disk that got a source later, a claim vmop 0.1 made) is never overwritten.
import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { ImportOutcome, sourceName, type ImportProgress } from '../../../api/import-progress.js';
import type { DiskStatus, ImportSource, VirtualMachine } from '../../../api/virtual-machine.js';
import type { VirtualMachineImage } from '../../../api/virtual-machine-image.js';
import {
  IMPORTED_ANNOTATION,
  IMPORT_SOURCE_ANNOTATION,
  LABEL_VOLUME,
  diskVolumeName,
  sourceDigest,
} from '../naming.js';
import type { RunnerClaim } from './claims.js';
import type { ClaimWait } from './claim-binding.js';

export interface ImportDisk {
  volume: string;
  claimName: string;
  source: ImportSource;
  /** What the importer copies when `source` names an image: that image's claim. */
  copyFrom?: { pvc: { name: string } };
  /** The claim is a file system (a runner's data) whose files are copied: a `pvc` source's only. */
  filesystem?: boolean;
}

export interface DiskImports {
  /** Claims to make now (marked with their source), before their importer pods. */
  createClaims: RunnerClaim[];
  /** Disks whose importer pod is to be made. */
  startImports: ImportDisk[];
  /** Claims whose import succeeded: mark them imported (then their importer pod goes). */
  markImported: Array<{ claim: string; digest: string }>;
  /** Importer pods to delete: done with, lost mid-way (a new one starts over), or for an old source. */
  deletePods: V1Pod[];
  /** What the disks' statuses say of their imports, by volume (sizes.ts says the rest). */
  statuses: Map<string, Pick<DiskStatus, 'phase' | 'progress' | 'importedBytes' | 'message'>>;
  /** Why the VM cannot start yet: a disk is still being imported, or its import failed. */
  waiting?: { reason: 'ImportingDisks' | 'DiskImportFailed'; message: string };
  /** Imports that ended since the last look, for Events; how long the importer pod took. */
  ended: Array<{ volume: string; outcome: ImportOutcome; seconds?: number }>;
}

/** The outcome an importer pod wrote into its termination message, when it ended with one. */
export function importOutcome(pod: V1Pod): ImportOutcome | undefined {
  const message = pod.status?.containerStatuses?.[0]?.state?.terminated?.message;
  if (!message) return undefined;
  try {
    return ImportOutcome.safeParse(JSON.parse(message)).data;
  } catch {
    return undefined;
  }
}

/** Why a helper pod (an importer, an export) that has not started does not (its claim is missing or on another node…). */
export function stuck(pod: V1Pod): string {
  const unscheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
  if (unscheduled?.message) return `; its pod cannot be scheduled: ${unscheduled.message}`;
  const waiting = pod.status?.containerStatuses?.[0]?.state?.waiting;
  if (waiting?.reason && waiting.reason !== 'ContainerCreating')
    return `; its pod cannot start: ${waiting.message ?? waiting.reason}`;
  return '';
}

/** The disks of the VM that name a source, with their volumes and claims. */
export function disksWithSource(vm: VirtualMachine, claims: RunnerClaim[]): ImportDisk[] {
  return vm.spec.vm.disks.flatMap((disk, index) => {
    const volume = diskVolumeName(disk, index);
    const claim = claims.find((c) => c.volume === volume);
    return disk.source && claim ? [{ volume, claimName: claim.claimName, source: disk.source }] : [];
  });
}

export interface ImportInput {
  claims: RunnerClaim[];
  existing: V1PersistentVolumeClaim[];
  importerPods: V1Pod[];
  /** The latest progress each importing disk sent, by volume. */
  progress: Map<string, ImportProgress>;
  /** Why an importer pod cannot use its claim yet (claim-binding.ts); ready when absent. */
  claimWait?: (claim: V1PersistentVolumeClaim) => ClaimWait | undefined;
}

/**
 * The VM's disk imports; `images` looks up a VirtualMachineImage of the VM's namespace: a disk
 * filled from one waits until it is Ready, then copies its claim.
 */
export function planDiskImports(
  input: ImportInput & { vm: VirtualMachine; images?: (name: string) => VirtualMachineImage | undefined },
): DiskImports {
  const disks: ImportDisk[] = [];
  const waitingForImages = new Map<string, Pick<DiskStatus, 'phase' | 'message'>>();
  for (const disk of disksWithSource(input.vm, input.claims)) {
    const imageName = disk.source.image?.name;
    if (!imageName) {
      disks.push(disk);
      continue;
    }
    const image = input.images?.(imageName);
    const status = image?.status;
    if (status?.phase === 'Ready' && status.claim) {
      disks.push({ ...disk, copyFrom: { pvc: { name: status.claim } } });
      continue;
    }
    // Only a claim still to be imported waits for the image; one imported (or older) is as it is.
    const claim = input.existing.find((c) => c.metadata?.name === disk.claimName);
    const annotations = claim?.metadata?.annotations ?? {};
    if (
      claim &&
      (annotations[IMPORTED_ANNOTATION] !== undefined || annotations[IMPORT_SOURCE_ANNOTATION] === undefined)
    )
      continue;
    waitingForImages.set(
      disk.volume,
      !image
        ? { phase: 'Importing', message: `waiting for image ${imageName}, which does not exist` }
        : status?.phase === 'Failed'
          ? { phase: 'Failed', message: `image ${imageName} failed: ${status.message ?? ''}` }
          : {
              phase: 'Importing',
              message: `waiting for image ${imageName} (${status?.phase ?? 'Pending'}${status?.progress ? ` ${status.progress}` : ''})`,
            },
    );
  }
  const plan = planImports({
    ...input,
    disks,
    failedBefore: (volume) =>
      input.vm.status?.disks?.some((d) => d.name === volume && d.phase === 'Failed') ?? false,
  });
  for (const [volume, status] of waitingForImages) plan.statuses.set(volume, status);
  const failed = [...waitingForImages].filter(([, status]) => status.phase === 'Failed');
  if (failed.length > 0 && plan.waiting?.reason !== 'DiskImportFailed')
    plan.waiting = {
      reason: 'DiskImportFailed',
      message: `importing a disk failed: ${failed.map(([volume, status]) => `${volume}: ${status.message}`).join('; ')}`,
    };
  else if (waitingForImages.size > 0 && !plan.waiting)
    plan.waiting = {
      reason: 'ImportingDisks',
      message: `waiting for disks to be imported: ${[...waitingForImages.keys()].join(', ')}`,
    };
  return plan;
}

type ImportsInput = ImportInput & {
  disks: ImportDisk[];
  /** Whether the disk's status said Failed already (its Event was told). */
  failedBefore: (volume: string) => boolean;
};

/** The importer pod `current` is running or about to: start it if missing, show its progress. */
function importUnderWay(
  disk: ImportDisk,
  claim: V1PersistentVolumeClaim,
  pod: V1Pod | undefined,
  input: ImportsInput,
  plan: DiskImports,
) {
  const current = pod && !pod.metadata?.deletionTimestamp ? pod : undefined;
  const wait = pod ? undefined : input.claimWait?.(claim);
  if (!pod && !wait) plan.startImports.push(disk);
  const progress = input.progress.get(disk.volume);
  const own = progress && current && progress.podUid === current.metadata?.uid ? progress : undefined;
  plan.statuses.set(disk.volume, {
    phase: 'Importing',
    ...(own?.percent !== undefined && { progress: `${Math.floor(own.percent)}%` }),
    ...(own && { importedBytes: own.bytes }),
    message: `importing ${sourceName(disk.source)}${own && own.attempt > 1 ? ` (attempt ${own.attempt})` : ''}${
      current ? stuck(current) : ''
    }${wait ? `; its claim ${wait.claim} is not bound yet (${wait.why})` : ''}`,
  });
}

/**
 * One disk's import, added to `plan`: 'importing' while it is under way, `failed` with why when it
 * failed for good, undefined when its claim holds what it holds (imported, or never to be).
 */
function planDiskImport(
  disk: ImportDisk,
  input: ImportsInput,
  plan: DiskImports,
  wanted: Set<V1Pod>,
): 'importing' | { failed: string } | undefined {
  const digest = sourceDigest(disk.source);
  const claim = input.existing.find((c) => c.metadata?.name === disk.claimName);
  const annotations = claim?.metadata?.annotations ?? {};
  const importing = (message = `importing ${sourceName(disk.source)}`) => {
    plan.statuses.set(disk.volume, { phase: 'Importing', message });
    return 'importing' as const;
  };
  if (!claim) {
    plan.createClaims.push(input.claims.find((c) => c.volume === disk.volume)!);
    return importing();
  }
  // Imported, or never to be imported: the claim holds what it holds.
  if (annotations[IMPORTED_ANNOTATION] !== undefined || annotations[IMPORT_SOURCE_ANNOTATION] === undefined)
    return undefined;
  const pod = input.importerPods.find((p) => p.metadata?.labels?.[LABEL_VOLUME] === disk.volume);
  const current = pod && !pod.metadata?.deletionTimestamp ? pod : undefined;
  if (current && current.metadata?.annotations?.[IMPORT_SOURCE_ANNOTATION] !== digest) {
    // The source changed before its import succeeded: the new one is imported instead.
    plan.deletePods.push(current);
    return importing();
  }
  if (current) wanted.add(current);
  const outcome = current && importOutcome(current);
  const phase = current?.status?.phase;
  if (outcome?.result === 'Succeeded' && phase === 'Succeeded') {
    plan.markImported.push({ claim: disk.claimName, digest });
    plan.ended.push({ volume: disk.volume, outcome, seconds: importerSeconds(current!) });
    plan.statuses.set(disk.volume, { phase: 'Importing', progress: '100%', message: outcome.message });
    return 'importing';
  }
  if (outcome?.result === 'Failed' && phase === 'Failed') {
    // For good: trying again gives the same answer. A changed source starts over (above).
    plan.statuses.set(disk.volume, { phase: 'Failed', message: `${outcome.reason}: ${outcome.message}` });
    if (!input.failedBefore(disk.volume)) plan.ended.push({ volume: disk.volume, outcome });
    return { failed: `${disk.volume}: ${outcome.message}` };
  }
  if (phase === 'Failed' || phase === 'Succeeded') {
    // Ended without an outcome (killed, evicted, out of memory): a new pod starts over.
    plan.deletePods.push(current!);
    return importing(
      `the importer pod ${current!.metadata!.name} ended without a result (${current!.status?.reason ?? 'killed'}); starting over`,
    );
  }
  importUnderWay(disk, claim, pod, input, plan);
  return 'importing';
}

/** From the importer pod's start to its end; undefined when either is not known. */
export function importerSeconds(pod: V1Pod): number | undefined {
  // The cache may hold the times as the apiserver wrote them (strings), the client's types say Date.
  const started = Date.parse(String(pod.status?.startTime ?? ''));
  const finished = Date.parse(
    String(pod.status?.containerStatuses?.[0]?.state?.terminated?.finishedAt ?? ''),
  );
  return Number.isNaN(started) || Number.isNaN(finished)
    ? undefined
    : Math.max(0, (finished - started) / 1000);
}

/** Imports of `disks` into their claims (a VM's disks, an image's claim). */
export function planImports(input: ImportsInput): DiskImports {
  const plan: DiskImports = {
    createClaims: [],
    startImports: [],
    markImported: [],
    deletePods: [],
    statuses: new Map(),
    ended: [],
  };
  const importing: string[] = [];
  const failed: string[] = [];
  const wanted = new Set<V1Pod>();
  for (const disk of input.disks) {
    const state = planDiskImport(disk, input, plan, wanted);
    if (state === 'importing') importing.push(disk.volume);
    else if (state) failed.push(state.failed);
  }
  // Importer pods no disk needs any more (imported, source removed): they go.
  for (const pod of input.importerPods)
    if (!wanted.has(pod) && !pod.metadata?.deletionTimestamp && !plan.deletePods.includes(pod))
      plan.deletePods.push(pod);
  if (failed.length > 0)
    plan.waiting = { reason: 'DiskImportFailed', message: `importing a disk failed: ${failed.join('; ')}` };
  else if (importing.length > 0)
    plan.waiting = {
      reason: 'ImportingDisks',
      message: `waiting for disks to be imported: ${importing.join(', ')}`,
    };
  return plan;
}
