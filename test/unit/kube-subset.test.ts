import { describe, expect, it } from 'vitest';
import { isSubset } from '../../src/kube/subset.js';

describe('isSubset (does the live object already have what we would write?)', () => {
  it('ignores fields the apiserver added', () => {
    expect(
      isSubset({ spec: { replicas: 1 } }, { spec: { replicas: 1, revisionHistoryLimit: 10 }, status: {} }),
    ).toBe(true);
  });
  it('sees a changed value, also inside list items', () => {
    expect(isSubset({ spec: { replicas: 1 } }, { spec: { replicas: 0 } })).toBe(false);
    expect(isSubset({ c: [{ name: 'a', image: 'x' }] }, { c: [{ name: 'a', image: 'y', tty: false }] })).toBe(
      false,
    );
    expect(isSubset({ c: [{ name: 'a' }] }, { c: [{ name: 'a' }, { name: 'b' }] })).toBe(false);
  });
  it('treats an empty list or map as equal to an absent one', () => {
    expect(isSubset({ volumes: [], labels: {} }, {})).toBe(true);
    expect(isSubset({ volumes: [] }, { volumes: [{ name: 'x' }] })).toBe(false);
  });
  it('sees a missing field', () => {
    expect(isSubset({ data: { 'config.yaml': 'a' } }, { data: {} })).toBe(false);
    expect(isSubset({ data: { 'config.yaml': 'a' } }, undefined)).toBe(false);
  });
});
