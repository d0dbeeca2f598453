// What the managers' caches keep of an object (trimForCache): enough for the reconciles, no more.
import { describe, expect, it } from 'vitest';
import { trimForCache } from '../../../src/kube/object-cache.js';

describe('trimForCache', () => {
  const policy = (labels: Record<string, string>) => ({
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: 'p', namespace: 'ns', labels, managedFields: [{ manager: 'kubectl' }] },
    spec: {
      podSelector: { matchLabels: { tier: 'web' } },
      policyTypes: ['Ingress'],
      ingress: Array.from({ length: 100 }, (_, i) => ({ from: [{ ipBlock: { cidr: `10.0.${i}.0/24` } }] })),
    },
  });

  it("keeps of another's NetworkPolicy which pods it isolates, not its rules", () => {
    const theirs = policy({ team: 'b' });
    trimForCache(theirs);
    expect(theirs.spec).toEqual({ podSelector: { matchLabels: { tier: 'web' } }, policyTypes: ['Ingress'] });
    expect(theirs.metadata.managedFields).toBeUndefined();
  });

  it("keeps vmop's own whole (a reconcile compares it with what it wants)", () => {
    const ours = policy({ 'app.kubernetes.io/managed-by': 'vm-operator' });
    trimForCache(ours);
    expect(ours.spec.ingress).toHaveLength(100);
  });
});
