// A metav1.LabelSelector applied to an object's labels, as the apiserver applies it (pure): every
// matchLabels pair and every matchExpressions requirement must hold; an empty selector matches all.
import type { z } from 'zod';
import type { LabelSelector } from '../api/kubernetes-types.js';

export function matchesLabelSelector(
  selector: z.infer<typeof LabelSelector>,
  labels: Record<string, string> = {},
): boolean {
  const pairs = Object.entries(selector.matchLabels ?? {});
  if (pairs.some(([key, value]) => labels[key] !== value)) return false;
  return (selector.matchExpressions ?? []).every(({ key, operator, values = [] }) => {
    const has = Object.hasOwn(labels, key);
    switch (operator) {
      case 'In':
        return has && values.includes(labels[key]!);
      case 'NotIn':
        return !has || !values.includes(labels[key]!);
      case 'Exists':
        return has;
      case 'DoesNotExist':
        return !has;
      default:
        return false; // the CRD admits only the four operators
    }
  });
}
