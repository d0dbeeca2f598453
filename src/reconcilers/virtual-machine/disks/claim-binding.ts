// Whether a pod may be made that uses a claim (pure). A pod whose claim of an Immediate
// StorageClass is not bound yet is unschedulable ("pod has unbound immediate
// PersistentVolumeClaims"); kube-scheduler should try it again once the claim binds, but when it
// misses that event the pod waits for its periodic retry of unschedulable pods, five minutes
// (seen in CI: a VM's start took over 300 s). So vmop makes such a pod only once its claims of
// Immediate classes are bound, as Deckhouse starts a VM only once its block devices are ready.
// A claim of a WaitForFirstConsumer class binds for the pod, and one without a (known) class is
// bound by hand whenever that happens: for those the pod is made at once, and the scheduler says
// what it waits for.
import type { V1PersistentVolumeClaim, V1Pod, V1StorageClass } from '@kubernetes/client-node';

export interface ClaimWait {
  claim: string;
  /** Why it is not ready for a pod, for the VM's status. */
  why: string;
}

export interface StorageClasses {
  byName(name: string): V1StorageClass | undefined;
  /** The cluster's default StorageClass, if it has one. */
  byDefault(): V1StorageClass | undefined;
}

const DEFAULT_CLASS_ANNOTATIONS = [
  'storageclass.kubernetes.io/is-default-class',
  'storageclass.beta.kubernetes.io/is-default-class',
];

const created = (object: V1StorageClass) => new Date(object.metadata?.creationTimestamp ?? 0).getTime();

/** The default StorageClass among `classes` (as the DefaultStorageClass admission plugin picks it). */
export function defaultStorageClass(classes: V1StorageClass[]): V1StorageClass | undefined {
  return classes
    .filter((c) => DEFAULT_CLASS_ANNOTATIONS.some((a) => c.metadata?.annotations?.[a] === 'true'))
    .sort((a, b) => created(b) - created(a))[0];
}

/**
 * Why a pod cannot use `claim` yet, or undefined when it can. `made`: whether the claim exists
 * (else it is the claim vmop is about to make, with the class the apiserver will give it).
 */
export function claimWait(
  claim: V1PersistentVolumeClaim,
  made: boolean,
  classes: StorageClasses,
): ClaimWait | undefined {
  const name = claim.metadata?.name ?? '';
  if (made && claim.status?.phase === 'Bound') return undefined;
  if (made && claim.status?.phase === 'Lost') return { claim: name, why: 'its volume is lost' };
  const className = claim.spec?.storageClassName;
  if (className === '') return undefined; // bound by hand: no telling when
  const storageClass = className ? classes.byName(className) : made ? undefined : classes.byDefault();
  if (!storageClass || storageClass.volumeBindingMode === 'WaitForFirstConsumer') return undefined;
  const why = made
    ? `waiting for StorageClass ${storageClass.metadata?.name} to provide a volume`
    : 'it is being made';
  return { claim: name, why };
}

/** The status message of a pod that waits for `waits`. */
export const claimWaitMessage = (what: string, waits: ClaimWait[]) =>
  `${what} waits for its claims to be bound: ${waits.map((w) => `${w.claim} (${w.why})`).join(', ')}`;

/** How long a pod may stay unschedulable for claims that are bound before it is made again. */
export const STUCK_ON_BOUND_CLAIMS_MS = 30_000;

/**
 * A pod that has not started, unschedulable for "unbound immediate PersistentVolumeClaims" while
 * all its claims are bound: kube-scheduler saw the pod before its own cache had the binding, and
 * it retries such a pod when the claim's update arrives, within its back-off (at most 10 s) —
 * unless it missed that update, and then only after five minutes. Past STUCK_ON_BOUND_CLAIMS_MS
 * the pod is made again (it never ran: nothing is lost); before, when to look again.
 */
export function stuckOnBoundClaims(
  pod: V1Pod | undefined,
  claims: V1PersistentVolumeClaim[],
  now: Date,
): { stuck: true } | { recheckInMs: number } | undefined {
  if (!pod || pod.spec?.nodeName || pod.metadata?.deletionTimestamp) return undefined;
  const unscheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
  if (!unscheduled?.message?.includes('unbound immediate PersistentVolumeClaims')) return undefined;
  const names = (pod.spec?.volumes ?? []).flatMap((v) => v.persistentVolumeClaim?.claimName ?? []);
  const bound = (name: string) => claims.find((c) => c.metadata?.name === name)?.status?.phase === 'Bound';
  if (!names.every(bound)) return undefined;
  const since = new Date(unscheduled.lastTransitionTime ?? now).getTime();
  const left = since + STUCK_ON_BOUND_CLAIMS_MS - now.getTime();
  return left <= 0 ? { stuck: true } : { recheckInMs: left };
}
