import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { VirtualMachine, type VirtualMachineStatus } from '../../../src/api/virtual-machine.js';
import { VmPool } from '../../../src/api/vm-pool.js';
import { assignedTo, chooseVm, heldAssignment, withAssignment } from '../../../src/pools/assignment.js';
import { retainedUntil } from '../../../src/pools/retention.js';

const fixture = (file: string) => parse(readFileSync(`test/fixtures/vm-operator/${file}`, 'utf8'));
const pool = VmPool.parse(fixture('dev-example-test-pool.yaml')); // retention PT1m
const pools = (name: string) => (name === pool.metadata.name ? pool : undefined);
const template = fixture('dev-example-test-vm01.yaml');
const NOW = new Date('2026-11-26T12:00:00Z');
const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();

function vm(name: string, status: VirtualMachineStatus = {}, pools = ['test-vms']) {
  return VirtualMachine.parse({
    ...template,
    metadata: { ...template.metadata, name },
    spec: { ...template.spec, pools },
    status,
  });
}
const assigned = (user: string, lastUsed: string, extra: VirtualMachineStatus = {}) => ({
  ...extra,
  assignment: { pool: 'test-vms', user, lastUsed },
});

describe('retention (ISO 8601, as VM-Operator)', () => {
  const from = new Date('2026-01-31T10:00:00Z');
  it('adds a duration to the last use', () => {
    expect(retainedUntil('PT1h', from).toISOString()).toBe('2026-01-31T11:00:00.000Z');
    expect(retainedUntil('PT4h30m', from).toISOString()).toBe('2026-01-31T14:30:00.000Z');
    expect(retainedUntil('P1DT0.5S', from).toISOString()).toBe('2026-02-01T10:00:00.500Z');
    expect(retainedUntil('P2W', from).toISOString()).toBe('2026-02-14T10:00:00.000Z');
    expect(retainedUntil('P1Y', from).toISOString()).toBe('2027-01-31T10:00:00.000Z');
  });
  it('takes a time as the end, whatever the last use', () => {
    expect(retainedUntil('2026-12-24T18:00:00Z', from).toISOString()).toBe('2026-12-24T18:00:00.000Z');
  });
  it('the pool defaults to one hour', () => {
    expect(
      VmPool.parse({ ...fixture('pools-md-vmpool.yaml'), spec: { permissions: [] } }).spec.retention,
    ).toBe('PT1h');
  });
});

describe('choosing a VM of a pool for a user', () => {
  it('prefers the least recently used, then a running one, then by name', () => {
    const vms = [
      vm('c', { phase: 'Running' }),
      vm('b', { phase: 'Stopped' }),
      vm('a', assigned('old', ago(5 * 60_000), { phase: 'Running' })), // retention passed: free again
    ];
    // never assigned counts as used longest ago; of those, the running one
    expect(chooseVm(vms, pool, pools, NOW)?.metadata.name).toBe('c');
    expect(chooseVm(vms.slice(1), pool, pools, NOW)?.metadata.name).toBe('b');
    expect(chooseVm([vms[2]!], pool, pools, NOW)?.metadata.name).toBe('a');
  });

  it('passes over VMs in use, held, being deleted or of another pool', () => {
    const held = vm('held', assigned('bob', ago(30_000))); // within PT1m
    const console = vm('console', { consoleClient: '10.0.0.7' });
    const other = vm('other', {}, ['another-pool']);
    const leaving = VirtualMachine.parse({
      ...vm('leaving'),
      metadata: { name: 'leaving', deletionTimestamp: NOW.toISOString() },
    });
    expect(chooseVm([held, console, other, leaving], pool, pools, NOW)).toBeUndefined();
    // an assignment whose pool is gone holds no longer
    expect(
      chooseVm(
        [vm('orphan', { assignment: { pool: 'gone', user: 'x', lastUsed: ago(0) } })],
        pool,
        pools,
        NOW,
      )?.metadata.name,
    ).toBe('orphan');
  });

  it("finds the user's own VM of the pool", () => {
    const vms = [vm('a', assigned('alice', ago(0))), vm('b', assigned('bob', ago(0)))];
    expect(assignedTo(vms, 'test-vms', 'bob')?.metadata.name).toBe('b');
    expect(assignedTo(vms, 'test-vms', 'carol')).toBeUndefined();
    expect(assignedTo(vms, 'other', 'bob')).toBeUndefined();
  });
});

describe('what becomes of an assignment (VM reconcile)', () => {
  it('holds within the retention and says when to look again', () => {
    const held = heldAssignment(vm('a', assigned('alice', ago(20_000))), pool, false, NOW);
    expect(held).toEqual({ assignment: assigned('alice', ago(20_000)).assignment, recheckInMs: 40_000 });
  });

  it('is released once the retention passed, its pool went, or the VM left the pool', () => {
    expect(heldAssignment(vm('a', assigned('alice', ago(60_000))), pool, false, NOW)).toEqual({
      released: 'alice did not use it for the retention of pool test-vms (PT1m)',
    });
    expect(heldAssignment(vm('a', assigned('alice', ago(0))), undefined, false, NOW)).toEqual({
      released: 'its pool test-vms is gone',
    });
    expect(heldAssignment(vm('a', assigned('alice', ago(0)), []), pool, false, NOW)).toEqual({
      released: 'the VM left pool test-vms',
    });
  });

  it('holds while a console is open and counts the retention from when it closed', () => {
    const opened = heldAssignment(vm('a', assigned('alice', ago(10 * 60_000))), pool, true, NOW);
    expect(opened).toEqual({ assignment: assigned('alice', NOW.toISOString()).assignment });
    const open = vm('a', assigned('alice', ago(10 * 60_000), { consoleClient: '10.0.0.7' }));
    expect(heldAssignment(open, pool, true, NOW)).toEqual({ assignment: open.status!.assignment });
    expect(heldAssignment(open, pool, false, NOW)).toEqual({
      assignment: assigned('alice', NOW.toISOString()).assignment,
      recheckInMs: 60_000,
    });
  });

  it('a VM without one has none, and the status carries exactly what holds', () => {
    expect(heldAssignment(vm('a'), pool, false, NOW)).toEqual({});
    const status = assigned('alice', ago(0), { phase: 'Running' });
    expect(withAssignment(status, undefined)).toEqual({ phase: 'Running' });
    expect(withAssignment({ phase: 'Running' }, status.assignment)).toEqual(status);
  });
});
