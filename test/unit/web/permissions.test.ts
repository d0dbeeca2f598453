import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { VmPool } from '../../../src/api/vm-pool.js';
import { granted, grantedOnVm, rbacRequestOf } from '../../../src/web/permissions.js';

const fixture = (file: string) => parse(readFileSync(`test/fixtures/vm-operator/${file}`, 'utf8'));
const pool = VmPool.parse(fixture('pools-md-vmpool.yaml')); // admin, role user: accessConsole, start
const vm = (status = {}) => VirtualMachine.parse({ ...fixture('dev-example-test-vm01.yaml'), status });
const alice = { user: 'alice', groups: ['user'] };

describe("who may do what: VM-Operator's grants", () => {
  it('gives a user or a role what their grants say, and everything of VM-Operator for *', () => {
    expect([...granted(alice, pool.spec.permissions)].sort()).toEqual(['accessConsole', 'start']);
    expect([...granted({ user: 'bob', groups: [] }, pool.spec.permissions)]).toEqual([]);
    expect([...granted({ user: 'x', groups: ['admin'] }, vm().spec.permissions)].sort()).toEqual([
      'accessConsole',
      'reset',
      'start',
      'stop',
      'takeConsole',
    ]);
    // taking a console over includes opening one
    expect([...granted(alice, [{ user: 'alice', may: ['takeConsole'] }])].sort()).toEqual([
      'accessConsole',
      'takeConsole',
    ]);
  });

  it("adds the pool's grants to a VM only while it is assigned to that person", () => {
    const pools = (name: string) => (name === 'test-vms' ? pool : undefined);
    const assigned = (user: string) =>
      vm({ assignment: { pool: 'test-vms', user, lastUsed: '2026-11-26T10:00:00Z' } });
    expect([...grantedOnVm(alice, assigned('alice'), pools)].sort()).toEqual(['accessConsole', 'start']);
    expect([...grantedOnVm(alice, assigned('bob'), pools)]).toEqual([]);
    expect([...grantedOnVm(alice, vm(), pools)]).toEqual([]);
  });

  it('asks RBAC for what the GUI does on the person’s behalf', () => {
    expect(rbacRequestOf('see')).toEqual({ verb: 'get', resource: 'vms' });
    expect(rbacRequestOf('resources')).toEqual({ verb: 'patch', resource: 'vms' });
    expect(rbacRequestOf('accessConsole')).toEqual({ verb: 'get', resource: 'vms', subresource: 'console' });
    for (const action of ['start', 'stop', 'reset', 'restart', 'migrate'] as const)
      expect(rbacRequestOf(action)).toEqual({ verb: 'create', resource: 'virtualmachineoperations' });
    expect(rbacRequestOf('snapshot')).toEqual({ verb: 'create', resource: 'virtualmachinesnapshots' });
    expect(rbacRequestOf('restore')).toEqual({ verb: 'create', resource: 'virtualmachinerestores' });
    expect(rbacRequestOf('clone')).toEqual({ verb: 'create', resource: 'virtualmachineclones' });
    expect(rbacRequestOf('delete')).toEqual({ verb: 'delete', resource: 'vms' });
  });
});
