import type { KubernetesObject } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { LabelIndex } from '../../../src/kube/label-index.js';

const INSTANCE = 'app.kubernetes.io/instance';
const pod = (namespace: string, name: string, labels: Record<string, string>): KubernetesObject => ({
  metadata: { namespace, name, labels },
});
const sorted = (names: ReadonlySet<string> | undefined) => (names ? [...names].sort() : names);

describe('LabelIndex', () => {
  it("finds a namespace's objects by an indexed label's value, not another namespace's", () => {
    const index = new LabelIndex([INSTANCE]);
    index.upsert(pod('a', 'web-1', { [INSTANCE]: 'web' }));
    index.upsert(pod('a', 'web-2', { [INSTANCE]: 'web', other: 'x' }));
    index.upsert(pod('a', 'db-1', { [INSTANCE]: 'db' }));
    index.upsert(pod('b', 'web-1', { [INSTANCE]: 'web' }));
    expect(sorted(index.candidates('a', { [INSTANCE]: 'web', other: 'x' }))).toEqual(['web-1', 'web-2']);
    expect(sorted(index.candidates('b', { [INSTANCE]: 'web' }))).toEqual(['web-1']);
    expect(sorted(index.candidates('c', { [INSTANCE]: 'web' }))).toEqual([]);
  });

  it('follows a label that changes or goes, and an object that is deleted', () => {
    const index = new LabelIndex([INSTANCE]);
    index.upsert(pod('a', 'p', { [INSTANCE]: 'web' }));
    index.upsert(pod('a', 'p', { [INSTANCE]: 'db' }));
    expect(sorted(index.candidates('a', { [INSTANCE]: 'web' }))).toEqual([]);
    expect(sorted(index.candidates('a', { [INSTANCE]: 'db' }))).toEqual(['p']);
    index.upsert(pod('a', 'p', {}));
    expect(sorted(index.candidates('a', { [INSTANCE]: 'db' }))).toEqual([]);
    index.upsert(pod('a', 'p', { [INSTANCE]: 'db' }));
    index.delete(pod('a', 'p', {}));
    expect(sorted(index.candidates('a', { [INSTANCE]: 'db' }))).toEqual([]);
  });

  it('cannot answer for labels it does not index (the caller scans)', () => {
    const index = new LabelIndex([INSTANCE]);
    index.upsert(pod('a', 'p', { [INSTANCE]: 'web', other: 'x' }));
    expect(index.candidates('a', { other: 'x' })).toBeUndefined();
    expect(index.candidates('a', {})).toBeUndefined();
  });
});
