// Conditions of vmop's own resources (classes, addresses): the transition time moves only when the
// status does.
import type { Condition } from '../api/virtual-machine.js';
import { kubeTime } from '../kube/time.js';

export type ConditionFacts = Omit<Condition, 'lastTransitionTime'>;

/** `next`, with the transition time kept from `current` when its status did not change. */
export function nextCondition(current: Condition[] | undefined, next: ConditionFacts, now: Date): Condition {
  const before = current?.find((c) => c.type === next.type);
  return {
    ...next,
    lastTransitionTime: before?.status === next.status ? before.lastTransitionTime : kubeTime(now),
  };
}
