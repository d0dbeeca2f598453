import { describe, expect, it } from 'vitest';
import { noCloudFiles } from '../../../src/runner/cloud-init.js';

describe('NoCloud files', () => {
  it('prepends #cloud-config to the user data and leaves out a network config nobody gave', () => {
    const files = noCloudFiles({ metaData: { 'local-hostname': 'vm1' }, userData: { packages: ['htop'] } });
    expect(Object.keys(files).sort()).toEqual(['meta-data', 'user-data']);
    expect(files['user-data']).toBe('#cloud-config\npackages:\n  - htop\n');
  });

  it('derives a default instance-id from the data, so changed data is a new instance', () => {
    const first = noCloudFiles({ userData: { a: 1 } })['meta-data'];
    expect(first).toMatch(/^instance-id: v[0-9a-f]{12}\n$/);
    expect(noCloudFiles({ userData: { a: 1 } })['meta-data']).toBe(first);
    expect(noCloudFiles({ userData: { a: 2 } })['meta-data']).not.toBe(first);
  });

  it('keeps an instance-id the controller set', () => {
    expect(noCloudFiles({ metaData: { 'instance-id': 'v42' } })['meta-data']).toBe('instance-id: v42\n');
  });
});
