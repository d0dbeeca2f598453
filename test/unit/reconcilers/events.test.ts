import { describe, expect, it } from 'vitest';
import {
  eventSeriesName,
  newEvent,
  repeatPatch,
  type EventObject,
  type ObjectEvent,
} from '../../../src/reconcilers/events.js';

const vm: EventObject = {
  apiVersion: 'vmoperator.jdrupes.org/v1',
  kind: 'VirtualMachine',
  name: 'test-vm',
  namespace: 'default',
  uid: 'uid-1',
};
const started: ObjectEvent = { type: 'Normal', reason: 'Started', message: 'the VM runs on node-1' };

describe('Event series', () => {
  it('names one series per object, type, reason and message', () => {
    const name = eventSeriesName(vm, started);
    expect(name).toMatch(/^test-vm\.[0-9a-f]{16}$/);
    expect(eventSeriesName(vm, { ...started })).toBe(name);
    expect(eventSeriesName(vm, { ...started, count: 3 })).toBe(name); // a count is not what it is
    for (const other of [
      eventSeriesName(vm, { ...started, message: 'the VM runs on node-2' }),
      eventSeriesName(vm, { ...started, reason: 'Stopped' }),
      eventSeriesName(vm, { ...started, type: 'Warning' }),
      eventSeriesName({ ...vm, uid: 'uid-2' }, started), // the same name, another VM incarnation
    ]) {
      expect(other).not.toBe(name);
    }
  });

  it('stays a valid object name for the longest VM name (52 characters)', () => {
    const name = eventSeriesName({ ...vm, name: 'v'.repeat(52) }, started);
    expect(name.length).toBeLessThanOrEqual(253);
    expect(name).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
  });

  it('starts a series with the count and both timestamps, from vmop', () => {
    const time = new Date('2026-11-25T10:00:00Z');
    expect(newEvent(vm, { ...started, count: 2 }, time)).toEqual({
      metadata: { name: eventSeriesName(vm, started), namespace: 'default' },
      involvedObject: vm,
      type: 'Normal',
      reason: 'Started',
      message: 'the VM runs on node-1',
      source: { component: 'vmop' },
      firstTimestamp: time,
      lastTimestamp: time,
      count: 2,
    });
  });

  it('counts a repeat on the series it read, guarded by its resourceVersion', () => {
    const time = new Date('2026-11-25T10:05:00Z');
    const existing = { ...newEvent(vm, started, new Date(0)), count: 4 };
    existing.metadata = { ...existing.metadata, resourceVersion: '42' };
    expect(repeatPatch(existing, started, time)).toEqual({
      metadata: { resourceVersion: '42' },
      count: 5,
      lastTimestamp: time,
    });
    expect(repeatPatch(existing, { ...started, count: 3 }, time).count).toBe(7);
  });
});
