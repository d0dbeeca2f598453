// The admin table's search, pickers and sort (web/vm-list.js, run in the browser as it is).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { vmView } from '../../../src/web/views.js';
import { choicesOf, selectVms } from '../../../web/vm-list.js';

/** A VM as the GUI gets it: the server's view of a VM with that status. */
const viewOf = (status: Record<string, unknown>) =>
  vmView(
    VirtualMachine.parse({
      ...parse(readFileSync('test/fixtures/vm-operator/dev-example-test-vm01.yaml', 'utf8')),
      status,
    }),
    [],
  );

const vm = (namespace: string, name: string, more: Record<string, unknown> = {}) => {
  const { ram = '1Gi', ...rest } = more;
  return { namespace, name, phase: 'Running', cpus: 1, ram, ramBytes: viewOf({ ram }).ramBytes, ...rest };
};
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

  it("gets each VM's RAM in bytes from the server's view, binary and decimal", () => {
    expect(viewOf({ ram: '512Mi' }).ramBytes).toBe(512 * 2 ** 20);
    expect(viewOf({ ram: '2G' }).ramBytes).toBe(2e9);
    expect(viewOf({ ram: '1073741824' }).ramBytes).toBe(2 ** 30);
    expect(viewOf({ ram: 'lots' }).ramBytes).toBe(0);
    expect(viewOf({}).ramBytes).toBe(0);
  });
});
