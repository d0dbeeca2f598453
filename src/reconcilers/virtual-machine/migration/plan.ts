// The next steps of a VM's live migration (pure), from what is: the request (the VM's annotation),
// status.migrationState, the VM's pods and claims, and what the source and target runners report.
// Level-triggered like the rest of the reconcile: any replica, also after a crash, finds where the
// migration stands and goes on, and every step is safe to repeat. The guest runs at the source
// until the target reports it arrived; until then, every failure ends in cleaning the target up.
import type { V1Affinity, V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import type { MigrationProgress, RunnerSnapshot } from '../../../api/runner-snapshot.js';
import type { MigrationState, VirtualMachine } from '../../../api/virtual-machine.js';
import type { MigrationRequest } from '../../../runner/migration/request.js';
import { kubeTime } from '../../../kube/time.js';
import { LABEL_VOLUME } from '../naming.js';
import type { NodeFacts } from '../node-facts.js';
import { runnerContainer } from '../runner-pod/facts.js';
import { podClaims, volumesToCopy, type Migratability } from './migratable.js';
import { LABEL_MIGRATION, targetPodName, type VmMigrationRequest } from './request.js';
import type { SlotAnswer } from '../../../operator/migration-slots.js';
import type { RunnerImage } from '../runner-pod/pod.js';
import { podMigrationRequest, targetClaim, targetClaimName, targetPod } from './target.js';

/** How long a migration may take before vmop gives it up (the guest stays at the source). */
export const MIGRATION_DEADLINE_MS = 10 * 60_000;
/** How long a target pod may find no node (anti-affinity, resources) before the migration gives up. */
export const UNSCHEDULABLE_TARGET_MS = 60_000;
/** How often a migration under way is looked at, beside the runners' reports. */
const CHECK_EVERY_MS = 5_000;
/** How often a migration that waits for a slot asks again (a freed slot goes to those who ask). */
const SLOT_RETRY_MS = 2_000;

export interface MigrationFacts {
  vm: VirtualMachine;
  request?: VmMigrationRequest;
  /** The VM's runner pods. */
  pods: V1Pod[];
  /** The VM's claims. */
  claims: V1PersistentVolumeClaim[];
  /** The pod the status names (the source while the migration runs). */
  current?: V1Pod;
  /** The current pod's runner's snapshot (its own, current one). */
  sourceSnapshot?: RunnerSnapshot;
  /** The target pod's runner's snapshot. */
  targetSnapshot?: RunnerSnapshot;
  migratable: Migratability;
  node: (name: string) => NodeFacts;
  /** The runner image the target runs: the VM's own, or the manager's default now (an upgrade moves onto it). */
  image?: RunnerImage;
  /** Whether the migration to begin has a slot (the migration limits); undefined: no limits. */
  slot?: SlotAnswer;
  /** What copies the running VM's disks now (a snapshot): a migration begins once it is done. */
  copying?: string;
  now: Date;
}

export interface MigrationPlan {
  /** status.migrationState as it is to be (written before anything else is done). */
  state?: MigrationState;
  /** Under way: the VM's phase is Migrating. */
  migrating: boolean;
  /** The target runs the guest now: it is the VM's pod from here on. */
  switchTo?: V1Pod;
  /** The migration's key Secret must exist. */
  ensureSecret?: boolean;
  /** The runner migration request to set on a pod (the source's; abort to give up): its record. */
  annotate?: { pod: V1Pod; request: MigrationRequest };
  /**
   * The request to send the pod's runner at once (api/runner-request.ts): again on every look
   * until its runner reports it acted, as Redis may have lost it.
   */
  send?: { pod: V1Pod; request: MigrationRequest };
  createTarget?: { pod: V1Pod; claims: V1PersistentVolumeClaim[] };
  deletePods: V1Pod[];
  /** Deleted first (the source's copied disks after a success, the target's after a failure). */
  deleteClaims: V1PersistentVolumeClaim[];
  /** Then these lose their migration label: they back the VM's volumes now. */
  keepClaims: V1PersistentVolumeClaim[];
  requeueAfterMs?: number;
}

const byName = (pods: V1Pod[], name: string | undefined) =>
  name === undefined ? undefined : pods.find((pod) => pod.metadata?.name === name);

const progressOf = (snapshot: RunnerSnapshot | undefined, id: string): MigrationProgress | undefined =>
  snapshot?.migration?.id === id ? snapshot.migration : undefined;

function nothing(migrating = false): MigrationPlan {
  return { migrating, deletePods: [], deleteClaims: [], keepClaims: [] };
}

export function planMigration(facts: MigrationFacts): MigrationPlan {
  const { vm, request } = facts;
  const state = vm.status?.migrationState;
  if (request && (state?.id !== request.id || state.waiting !== undefined)) return begin(facts, request);
  if (!state) return nothing();
  if (state.result) return cleanUp(facts, state);
  return goOn(facts, state);
}

/** A new request: refused with a reason, or recorded (the status names the source first). */
function begin(facts: MigrationFacts, request: VmMigrationRequest): MigrationPlan {
  const { vm, current, now } = facts;
  const base = {
    id: request.id,
    ...(request.operation && { operation: request.operation }),
    sourcePod: current?.metadata?.name ?? '',
    ...(current?.spec?.nodeName && { sourceNode: current.spec.nodeName }),
    ...(request.nodeName && { requestedNode: request.nodeName }),
    startTimestamp: kubeTime(now),
  };
  const refuse = (message: string): MigrationPlan => ({
    ...nothing(),
    state: { ...base, result: 'Failed', message, endTimestamp: kubeTime(now) },
  });
  const running =
    vm.spec.vm.state === 'Running' &&
    current &&
    !current.metadata?.deletionTimestamp &&
    facts.sourceSnapshot?.phase === 'running';
  if (!running) return refuse('the VM does not run');
  if (!facts.migratable.migratable) return refuse(facts.migratable.message);
  if (request.nodeName && request.nodeName === current.spec?.nodeName)
    return refuse(`the VM runs on ${request.nodeName} already`);
  if (facts.copying) {
    const waiting = `${facts.copying} copies the VM's disks: the VM moves once it has copied them`;
    const before = vm.status?.migrationState;
    const same = before?.id === request.id && before.waiting === waiting;
    return { ...nothing(), ...(!same && { state: { ...base, waiting } }), requeueAfterMs: SLOT_RETRY_MS };
  }
  if (facts.slot && !facts.slot.granted) {
    // Shown, and asked again until a slot is free; written only when what it waits for changed.
    const before = vm.status?.migrationState;
    const same = before?.id === request.id && before.waiting === facts.slot.waiting;
    const waiting = { ...base, waiting: facts.slot.waiting };
    return { ...nothing(), ...(!same && { state: waiting }), requeueAfterMs: SLOT_RETRY_MS };
  }
  return { ...nothing(true), state: base, ensureSecret: true, requeueAfterMs: 0 };
}

/**
 * Why the target cannot take the guest, when it cannot: its runner failed (e.g. QEMU did not
 * start), its container cannot start (its image cannot be pulled…), or its runner was restarted
 * (the QEMU waiting for the guest went with it). Then the migration fails at once, in the words
 * of the runner or kubelet, instead of at its deadline.
 */
function targetBroken(target: V1Pod, snapshot: RunnerSnapshot | undefined): string | undefined {
  if (snapshot?.phase === 'failed')
    return `the target cannot take the VM: ${snapshot.message ?? 'its runner failed'}`;
  const container = runnerContainer(target);
  const waiting = container?.state?.waiting;
  if (waiting?.reason && !['ContainerCreating', 'PodInitializing'].includes(waiting.reason))
    return `the target's runner cannot start: ${waiting.message ?? waiting.reason}`;
  if ((container?.restartCount ?? 0) > 0) {
    const ended = container?.lastState?.terminated;
    const why = ended?.message ?? ended?.reason ?? `exit code ${ended?.exitCode ?? 'unknown'}`;
    return `the target's runner was restarted (${why.trim()})`;
  }
  return undefined;
}

function goOn(facts: MigrationFacts, state: MigrationState): MigrationPlan {
  const { vm, request, pods, now } = facts;
  const source = byName(pods, state.sourcePod);
  const target = byName(pods, state.targetPod);
  const sourceProgress = progressOf(facts.sourceSnapshot, state.id);
  const targetProgress = progressOf(facts.targetSnapshot, state.id);
  const fail = (message: string): MigrationPlan =>
    cleanUp(facts, { ...state, result: 'Failed', message, endTimestamp: kubeTime(now) }, true);

  if (request?.id !== state.id) return fail('the migration was cancelled (its operation ended)');
  if (vm.spec.vm.state !== 'Running') return fail('the VM is to stop');
  if (!source || source.metadata?.deletionTimestamp)
    return fail(`the source pod ${state.sourcePod} went away`);
  if (sourceProgress?.state === 'failed') return fail(sourceProgress.message ?? 'the source gave up');
  if (targetProgress?.state === 'failed') return fail(targetProgress.message ?? 'the target gave up');
  if (now.getTime() - new Date(state.startTimestamp).getTime() > MIGRATION_DEADLINE_MS)
    return fail(`not done after ${MIGRATION_DEADLINE_MS / 60_000} minutes`);
  if (target) {
    const phase = target.status?.phase;
    if (target.metadata?.deletionTimestamp || phase === 'Failed' || phase === 'Succeeded')
      return fail(`the target pod ${state.targetPod} went away`);
    const node = target.spec?.nodeName && facts.node(target.spec.nodeName);
    if (node && node.state !== 'Ready') return fail(`the target node ${node.name} does not report`);
    const broken = targetBroken(target, facts.targetSnapshot);
    if (broken) return fail(broken);
    const scheduled = target.status?.conditions?.find((c) => c.type === 'PodScheduled');
    const since = scheduled?.lastTransitionTime && new Date(scheduled.lastTransitionTime).getTime();
    if (scheduled?.reason === 'Unschedulable' && since && now.getTime() - since > UNSCHEDULABLE_TARGET_MS)
      return fail(`no node can take the VM: ${scheduled.message ?? 'the target pod is unschedulable'}`);
  } else if (state.targetNode) {
    // It was seen scheduled (the status says where), so the cache does not just lag: it is gone.
    return fail(`the target pod ${state.targetPod} went away`);
  }

  const arrived = targetProgress?.state === 'completed' && facts.targetSnapshot?.phase === 'running';
  if (arrived && target) {
    const done: MigrationState = {
      ...state,
      result: 'Succeeded',
      endTimestamp: kubeTime(now),
      message: `the VM moved live from ${state.sourceNode} to ${target.spec?.nodeName}`,
      ...(target.spec?.nodeName && { targetNode: target.spec.nodeName }),
      ...(sourceProgress?.downtimeMs !== undefined && { downtimeMs: sourceProgress.downtimeMs }),
      ...(sourceProgress?.totalMs !== undefined && { transferMs: sourceProgress.totalMs }),
      ...(sourceProgress?.bytes !== undefined && { bytesTransferred: sourceProgress.bytes }),
    };
    return { ...cleanUp({ ...facts, current: target }, done), switchTo: target };
  }

  const plan: MigrationPlan = { ...nothing(true), ensureSecret: true, requeueAfterMs: CHECK_EVERY_MS };
  const copied = volumesToCopy(source, facts.claims);
  const asked = podMigrationRequest(source);
  const sourceRequest: MigrationRequest = {
    id: state.id,
    role: 'source',
    mirror: copied.map((volume) => `/dev/${volume}`),
  };
  if (asked?.id !== state.id || asked.role !== 'source')
    plan.annotate = { pod: source, request: sourceRequest };
  if (!sourceProgress) plan.send = { pod: source, request: sourceRequest };
  if (target) {
    // Where it landed, once scheduled (also tells a gone target from a lagging cache).
    if (target.spec?.nodeName && state.targetNode !== target.spec.nodeName)
      plan.state = { ...state, targetNode: target.spec.nodeName };
    return plan;
  }
  const address = source.status?.podIP;
  if (!state.targetPod && sourceProgress?.state === 'listening' && sourceProgress.port && address) {
    const name = targetPodName(vm.metadata.name, state.id);
    const sourceClaims = podClaims(source);
    const claimsByName = new Map(facts.claims.map((claim) => [claim.metadata?.name, claim]));
    const copies = copied.flatMap((volume) => {
      const claim = claimsByName.get(sourceClaims.get(volume));
      return claim ? [targetClaim(claim, { vmName: vm.metadata.name, volume, id: state.id })] : [];
    });
    const pod = targetPod(source, {
      name,
      ...(facts.image && { image: facts.image }),
      id: state.id,
      sourceAddress: `${address}:${sourceProgress.port}`,
      sourceNode: source.spec!.nodeName!,
      ...(state.requestedNode && { requestedNode: state.requestedNode }),
      ...(vm.spec.affinity && { affinity: vm.spec.affinity as V1Affinity }),
      claimCopies: new Map(
        copied.map((volume) => [
          sourceClaims.get(volume)!,
          targetClaimName(vm.metadata.name, volume, state.id),
        ]),
      ),
    });
    plan.state = { ...state, targetPod: name, ...(copied.length > 0 && { copiedDisks: copied }) };
    plan.createTarget = { pod, claims: copies };
  }
  return plan;
}

/**
 * What is left to tidy after the migration ended (also repeated by later reconciles until done):
 * after a success the source pod and its copied disks' claims go, the target's claims become the
 * VM's; after a failure the target pod and its claims go, and the source is told to give up.
 */
function cleanUp(facts: MigrationFacts, state: MigrationState, justFailed = false): MigrationPlan {
  const { pods, claims, current } = facts;
  const plan: MigrationPlan = {
    ...nothing(),
    ...(justFailed || state !== facts.vm.status?.migrationState ? { state } : {}),
  };
  const ours = claims.filter((claim) => claim.metadata?.labels?.[LABEL_MIGRATION] === state.id);
  if (state.result === 'Succeeded') {
    if (!current || current.metadata?.name !== state.targetPod) return plan;
    const source = byName(pods, state.sourcePod);
    if (source && !source.metadata?.deletionTimestamp) plan.deletePods.push(source);
    const inUse = new Set(podClaims(current).values());
    const copied = new Set(state.copiedDisks ?? []);
    plan.deleteClaims = claims.filter(
      (claim) =>
        copied.has(claim.metadata?.labels?.[LABEL_VOLUME] ?? '') &&
        !inUse.has(claim.metadata?.name ?? '') &&
        !claim.metadata?.deletionTimestamp,
    );
    plan.keepClaims = ours;
    return plan;
  }
  const target = byName(pods, state.targetPod);
  if (target && !target.metadata?.deletionTimestamp) plan.deletePods.push(target);
  plan.deleteClaims = ours.filter((claim) => !claim.metadata?.deletionTimestamp);
  const source = byName(pods, state.sourcePod);
  const asked = podMigrationRequest(source);
  const progress = progressOf(facts.sourceSnapshot, state.id);
  if (source && asked?.id === state.id && progress?.state !== 'failed') {
    const abort = { ...asked, abort: true };
    if (!asked.abort) plan.annotate = { pod: source, request: abort };
    // Sent with the record (it replaces the start the runner may not have read yet), and again
    // while the runner's migration is under way.
    if (!asked.abort || (progress && progress.state !== 'completed'))
      plan.send = { pod: source, request: abort };
  }
  return plan;
}
