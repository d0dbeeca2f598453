// The admin table's search, pickers and sort (web/vm-list.js, run in the browser as it is).
import { describe, expect, it } from 'vitest';
import { bytesOf, choicesOf, selectVms } from '../../../web/vm-list.js';

const vm = (namespace: string, name: string, more: Record<string, unknown> = {}) => ({
  namespace,
  name,
  phase: 'Running',
  cpus: 1,
  ram: '1Gi',
  ...more,
});
const names = (vms: Array<{ namespace: string; name: string }>) => vms.map((v) => `${v.namespace}/${v.name}`);

const fleet = [
  vm('team-b', 'web', { node: 'node-2', cpus: 4, ram: '512Mi', ipAddress: '10.66.10.7' }),
  vm('team-a', 'db', { node: 'node-1', cpus: 2, ram: '4Gi' }),
  vm('team-a', 'build', { phase: 'Stopped', ram: '2G' }),
  vm('default', 'test-guest', { phase: 'Pending', node: 'node-1', cpus: 2, ram: '1Gi' }),
];

describe('the admin table list', () => {
  it('is sorted by namespace/name unless asked otherwise', () => {
    expect(names(selectVms(fleet))).toEqual([
      'default/test-guest',
      'team-a/build',
      'team-a/db',
      'team-b/web',
    ]);
  });

  it('finds a VM by part of its namespace/name or its address, in any case', () => {
    expect(names(selectVms(fleet, { text: 'A/D' }))).toEqual(['team-a/db']);
    expect(names(selectVms(fleet, { text: '10.66.10.7' }))).toEqual(['team-b/web']);
    expect(selectVms(fleet, { text: 'nothing-like-it' })).toEqual([]);
  });

  it('keeps only the namespace, phase and node picked, together', () => {
    expect(names(selectVms(fleet, { namespace: 'team-a' }))).toEqual(['team-a/build', 'team-a/db']);
    expect(names(selectVms(fleet, { phase: 'Running' }))).toEqual(['team-a/db', 'team-b/web']);
    expect(names(selectVms(fleet, { node: 'node-1', phase: 'Running' }))).toEqual(['team-a/db']);
  });

  it('sorts by CPUs and by RAM as numbers, either way, ties by name', () => {
    expect(names(selectVms(fleet, { sortBy: 'cpus', descending: true }))).toEqual([
      'team-b/web',
      'default/test-guest',
      'team-a/db',
      'team-a/build',
    ]);
    // 512Mi < 1Gi < 2G (decimal) < 4Gi
    expect(names(selectVms(fleet, { sortBy: 'ram' }))).toEqual([
      'team-b/web',
      'default/test-guest',
      'team-a/build',
      'team-a/db',
    ]);
    expect(names(selectVms(fleet, { sortBy: 'node' }))[0]).toBe('team-a/build'); // no node first
  });

  it('offers as choices the namespaces, phases and nodes the VMs have', () => {
    expect(choicesOf(fleet)).toEqual({
      namespaces: ['default', 'team-a', 'team-b'],
      phases: ['Pending', 'Running', 'Stopped'],
      nodes: ['node-1', 'node-2'],
    });
  });

  it('reads RAM quantities in bytes, binary and decimal', () => {
    expect(bytesOf('512Mi')).toBe(512 * 2 ** 20);
    expect(bytesOf('2G')).toBe(2e9);
    expect(bytesOf('1073741824')).toBe(2 ** 30);
    expect(bytesOf('lots')).toBe(0);
  });
});
