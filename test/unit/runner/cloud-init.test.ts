import { describe, expect, it } from 'vitest';
import { noCloudFiles } from '../../../src/runner/cloud-init.js';

describe('NoCloud files', () => {
  it('prepends #cloud-config to the user data and leaves out a network config nobody gave', () => {
    const files = noCloudFiles({ metaData: { 'local-hostname': 'vm1' }, userData: { packages: ['htop'] } });
    expect(Object.keys(files).sort()).toEqual(['meta-data', 'user-data']);
    expect(files['user-data']).toBe('#cloud-config\npackages:\n  - htop\n');
  });

  it('keeps a long value (an SSH key) on one line', () => {
    const key = `ssh-ed25519 ${'A'.repeat(68)} someone@somewhere`;
    const files = noCloudFiles({ userData: { ssh_authorized_keys: [key] } });
    expect(files['user-data']!.split('\n')).toContain(`  - ${key}`);
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

  it("uses a Secret's user-data and network-config as written and merges its meta-data over the config's", () => {
    const files = noCloudFiles(
      { metaData: { 'local-hostname': 'inline', zone: 'a' }, secretDir: '/secret' },
      {
        userData: '#!/bin/sh\necho hi\n',
        metaData: 'local-hostname: secret\n',
        networkConfig: 'version: 2\n',
      },
    );
    expect(files['user-data']).toBe('#!/bin/sh\necho hi\n');
    expect(files['network-config']).toBe('version: 2\n');
    expect(files['meta-data']).toMatch(/^instance-id: v[0-9a-f]{12}\nlocal-hostname: secret\nzone: a\n$/);
  });

  it("a changed Secret is a new instance; the secret directory's path alone is not", () => {
    const id = (userData: string, secretDir = '/a') => noCloudFiles({ secretDir }, { userData })['meta-data'];
    expect(id('one')).not.toBe(id('two'));
    expect(id('one', '/a')).toBe(id('one', '/b'));
  });

  it("refuses a Secret's meta-data that is not a mapping, without quoting it", () => {
    expect(() => noCloudFiles({}, { userData: 'x', metaData: '- hunter2' })).toThrow(
      "the Secret's metaData is not a YAML mapping",
    );
  });
});
