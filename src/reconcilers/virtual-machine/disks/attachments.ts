// Disks added to and removed from a running VM (pure). The runner pod keeps the disks it was made
// with; a disk the spec gains meanwhile is exported by a helper pod on the runner's node
// (attach-pod.ts) and handed to the runner in its config (vm.hotplugDisks), which attaches it to
// the running QEMU; a disk so attached that the spec loses is detached by the runner, and its
// helper pod goes once the runner let it go. From the next start on every disk of the spec is a
// disk of the runner pod: what was attached stays, without a helper.
import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import type { HotplugDiskConfig } from '../../../api/runner-config.js';
import type { RunnerSnapshot } from '../../../api/runner-snapshot.js';
import type { DiskAttachment, DiskStatus } from '../../../api/virtual-machine.js';
import type { ObjectEvent } from '../../events.js';
import { NBD_EXPORT, NBD_PORT } from './attach-pod.js';
import { stuck } from './imports.js';
import { IMPORTED_ANNOTATION, IMPORT_SOURCE_ANNOTATION, LABEL_VOLUME } from '../naming.js';
import type { RunnerClaim } from './claims.js';
import { runnerPodDisks } from '../runner-pod/facts.js';

export interface AttachDisk {
  volume: string;
  claimName: string;
}

export interface DiskAttachments {
  /** Claims of disks to attach that do not exist yet. */
  createClaims: RunnerClaim[];
  /** Helper pods to make, on `nodeName` (the runner's). */
  createPods: Array<AttachDisk & { nodeName: string }>;
  deletePods: V1Pod[];
  /** What the runner is to have attached (its config's vm.hotplugDisks). */
  config: HotplugDiskConfig[];
  /** The disks the runner pod was made with (its config's drives), while it is there. */
  podVolumes?: Set<string>;
  /** Each attached, attaching or detaching disk's state, by volume. */
  statuses: Map<string, DiskAttachment>;
  /** Disks the spec lost that were there when the VM started: they go at the next restart. */
  keptUntilRestart: Array<{ volume: string; claim: string }>;
  /** The VM's key Secret is needed (the exports' TLS) and missing. */
  ensureSecret: boolean;
}

const isEnded = (pod: V1Pod) => pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
const isReady = (pod: V1Pod) =>
  pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** What planning one disk's attachment needs: the plan it adds to, and the guest's side. */
interface AttachContext {
  plan: DiskAttachments;
  existing: V1PersistentVolumeClaim[];
  /** The VM's attach pods that are not being deleted. */
  live: V1Pod[];
  nodeName: string;
  /** What the runner holds attached, by volume. */
  held: NonNullable<RunnerSnapshot['hotplugDisks']>;
  hasKeySecret: boolean;
  /** Attach pods still needed. */
  wanted: Set<V1Pod>;
}

/** A disk of the spec that is not the pod's own: claim, export pod, then the runner attaches it. */
function planAttachment(disk: RunnerClaim, ctx: AttachContext): void {
  const { plan, nodeName } = ctx;
  const set = (phase: DiskAttachment['phase'], reason: string, message?: string) =>
    plan.statuses.set(disk.volume, { phase, reason, ...(message && { message }) });
  const claim = ctx.existing.find((c) => c.metadata?.name === disk.claimName);
  if (!claim) {
    plan.createClaims.push(disk);
    set('Pending', 'ClaimPending', `making claim ${disk.claimName}`);
    return;
  }
  const annotations = claim.metadata?.annotations ?? {};
  if (annotations[IMPORT_SOURCE_ANNOTATION] !== undefined && annotations[IMPORTED_ANNOTATION] === undefined) {
    set('Pending', 'Importing', 'waiting for its import');
    return;
  }
  if (!ctx.hasKeySecret) plan.ensureSecret = true;
  const helper = ctx.live.find((p) => p.metadata?.labels?.[LABEL_VOLUME] === disk.volume);
  if (helper && (isEnded(helper) || (helper.spec?.nodeName && helper.spec.nodeName !== nodeName))) {
    // Its export ended, or serves another node (the VM moved): a new one.
    plan.deletePods.push(helper);
    set('Pending', 'ExportRestarting', `the export of claim ${disk.claimName} ended; starting it again`);
    return;
  }
  if (!helper) {
    plan.createPods.push({ volume: disk.volume, claimName: disk.claimName, nodeName });
    set('Pending', 'ExportStarting', `exporting claim ${disk.claimName} on node ${nodeName}`);
    return;
  }
  ctx.wanted.add(helper);
  const address = helper.status?.podIP;
  if (!isReady(helper) || !address) {
    const why = stuck(helper);
    if (why.includes('volume node affinity conflict'))
      set('Failed', 'ClaimOnAnotherNode', `claim ${disk.claimName} cannot be used on node ${nodeName}${why}`);
    else set('Pending', 'ExportStarting', `exporting claim ${disk.claimName} on node ${nodeName}${why}`);
    return;
  }
  plan.config.push({ volume: disk.volume, host: address, port: NBD_PORT, export: NBD_EXPORT });
  const state = ctx.held[disk.volume];
  if (state?.state === 'attached')
    set('Attached', 'Attached', `attached over NBD from pod ${helper.metadata?.name}`);
  else if (state?.state === 'failed') set('Failed', 'AttachFailed', state.message);
  else set('InProgress', 'Attaching', 'the runner attaches it');
}

/** Disks attached at runtime that the spec lost: detached by the runner, then their export goes. */
function planDetachments(specVolumes: Set<string>, ctx: AttachContext): void {
  for (const [volume, state] of Object.entries(ctx.held)) {
    if (specVolumes.has(volume)) continue;
    const helper = ctx.live.find((p) => p.metadata?.labels?.[LABEL_VOLUME] === volume);
    if (helper) ctx.wanted.add(helper);
    ctx.plan.statuses.set(
      volume,
      state.state === 'failed'
        ? { phase: 'Failed', reason: 'DetachFailed', ...(state.message && { message: state.message }) }
        : { phase: 'Detaching', reason: 'Detaching', message: 'the guest lets it go' },
    );
  }
}

export function planDiskAttachments(input: {
  /** The spec's disk claims (runnerClaims(); the runner data claim is ignored). */
  claims: RunnerClaim[];
  existing: V1PersistentVolumeClaim[];
  /** The runner pod running the guest, if any. */
  pod: V1Pod | undefined;
  attachPods: V1Pod[];
  /** The runner pod's current snapshot (currentSnapshot()). */
  snapshot: RunnerSnapshot | undefined;
  hasKeySecret: boolean;
}): DiskAttachments {
  const plan: DiskAttachments = {
    createClaims: [],
    createPods: [],
    deletePods: [],
    config: [],
    statuses: new Map(),
    keptUntilRestart: [],
    ensureSecret: false,
  };
  const pod = input.pod?.metadata?.deletionTimestamp ? undefined : input.pod;
  const nodeName = pod?.spec?.nodeName;
  const live = input.attachPods.filter((p) => !p.metadata?.deletionTimestamp);
  // A disk the spec gains while the pod starts waits for it to run (its config has the pod's disks).
  const inPod = runnerPodDisks(pod);
  if (pod) plan.podVolumes = new Set(inPod.keys());
  if (!pod || !nodeName || pod.status?.phase !== 'Running') {
    // No guest to attach to: every disk of the spec is the next pod's own. A guest shutting down
    // keeps its disks to the end.
    if (!input.pod) plan.deletePods.push(...live);
    return plan;
  }
  const ctx: AttachContext = {
    plan,
    existing: input.existing,
    live,
    nodeName,
    held: input.snapshot?.hotplugDisks ?? {},
    hasKeySecret: input.hasKeySecret,
    wanted: new Set(),
  };
  const disks = input.claims.filter((claim) => claim.block);
  for (const disk of disks.filter((d) => !inPod.has(d.volume))) planAttachment(disk, ctx);
  const specVolumes = new Set(disks.map((d) => d.volume));
  planDetachments(specVolumes, ctx);
  for (const [volume, claim] of inPod)
    if (!specVolumes.has(volume)) plan.keptUntilRestart.push({ volume, claim });
  for (const helper of live)
    if (!ctx.wanted.has(helper) && !plan.deletePods.includes(helper)) plan.deletePods.push(helper);
  return plan;
}

/**
 * The disks' statuses with their attachments: the spec's disks get theirs, and disks the spec lost
 * that the guest still has are listed after them.
 */
export function withAttachments(
  statuses: DiskStatus[],
  plan: DiskAttachments,
  existing: V1PersistentVolumeClaim[],
): DiskStatus[] {
  const listed = new Set(statuses.map((disk) => disk.name));
  const claimOf = (volume: string) =>
    existing.find((claim) => claim.metadata?.labels?.[LABEL_VOLUME] === volume)?.metadata?.name ?? '';
  const kept = new Map(plan.keptUntilRestart.map((disk) => [disk.volume, disk.claim]));
  const gone = [...plan.statuses.keys(), ...kept.keys()].filter((volume) => !listed.has(volume));
  return [
    ...statuses.map((disk) => {
      const attachment = plan.statuses.get(disk.name);
      return attachment ? { ...disk, attachment } : disk;
    }),
    ...[...new Set(gone)].map((volume): DiskStatus => {
      const claim = kept.get(volume) ?? claimOf(volume);
      return {
        name: volume,
        claim,
        phase: 'Ready',
        attachment: plan.statuses.get(volume) ?? {
          phase: 'Attached',
          reason: 'DetachAtRestart',
          message:
            'the VM started with it (a disk it may boot from, on a bus that cannot unplug): it is not detached while the VM runs, and goes at its next restart',
        },
      };
    }),
  ];
}

/** Events for attachments that changed phase between two statuses' disks. */
export function attachmentEvents(
  before: DiskStatus[] | undefined,
  after: DiskStatus[] | undefined,
): ObjectEvent[] {
  const was = new Map((before ?? []).map((disk) => [disk.name, disk.attachment]));
  const events: ObjectEvent[] = [];
  for (const disk of after ?? []) {
    const [old, now] = [was.get(disk.name), disk.attachment];
    if (!now || old?.phase === now.phase) continue;
    if (now.phase === 'Attached' && now.reason === 'Attached')
      events.push({
        type: 'Normal',
        reason: 'DiskAttached',
        message: `disk ${disk.name}: attached to the running VM`,
      });
    else if (now.phase === 'Failed')
      events.push({
        type: 'Warning',
        reason: 'DiskAttachFailed',
        message: `disk ${disk.name}: ${now.message ?? now.reason}`,
      });
  }
  for (const disk of before ?? []) {
    if (disk.attachment?.phase === 'Detaching' && !(after ?? []).some((d) => d.name === disk.name))
      events.push({
        type: 'Normal',
        reason: 'DiskDetached',
        message: `disk ${disk.name}: detached from the running VM`,
      });
  }
  return events;
}
