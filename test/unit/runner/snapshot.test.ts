import { describe, expect, it } from 'vitest';
import { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import type { VmEvent } from '../../../src/runner/qmp/events.js';
import { foldEvent, type SnapshotState } from '../../../src/runner/snapshot/fold.js';
import { SnapshotStore } from '../../../src/runner/snapshot/store.js';

const AT = '2030-01-01T00:00:00.000Z';
const AGENT = 'vmop-agent';
const initial: SnapshotState = {
  runId: 'run-1',
  phase: 'booting',
  cpus: 1,
  ram: 256,
  drives: { cd0: { tray: 'closed', medium: 'a.iso' } },
  booted: false,
};
const fold = (state: SnapshotState, event: VmEvent) => foldEvent(state, event, AT, AGENT);
const spiceInfo = (port: string, channel?: number) => ({
  server: { host: '127.0.0.1', port: '5900', family: 'ipv4' },
  client: {
    host: '10.0.0.9',
    port,
    family: 'ipv4',
    ...(channel === undefined ? {} : { 'channel-type': channel }),
  },
});

describe('folding QMP events into the snapshot', () => {
  it('records a shutdown and who initiated it', () => {
    const state = fold(initial, { event: 'SHUTDOWN', data: { guest: true, reason: 'guest-shutdown' } });
    expect(state).toMatchObject({
      phase: 'stopping',
      lastShutdown: { guest: true, reason: 'guest-shutdown', at: AT },
    });
  });

  it('takes the RAM from BALLOON_CHANGE', () => {
    expect(fold(initial, { event: 'BALLOON_CHANGE', data: { actual: 128 } }).ram).toBe(128);
  });

  it('follows the tray of known CD drives', () => {
    const open = fold(initial, {
      event: 'DEVICE_TRAY_MOVED',
      data: { device: 'drive-cd0', id: 'cd0', 'tray-open': true },
    });
    expect(open.drives.cd0).toEqual({ tray: 'open', medium: 'a.iso' });
    const other = fold(initial, {
      event: 'DEVICE_TRAY_MOVED',
      data: { device: 'x', id: 'cd7', 'tray-open': true },
    });
    expect(other).toEqual(initial);
  });

  it('is running while the guest holds the agent port open', () => {
    const booted = fold(initial, { event: 'VSERPORT_CHANGE', data: { id: AGENT, open: true } });
    expect(booted).toMatchObject({ booted: true, phase: 'running' });
    expect(fold(booted, { event: 'VSERPORT_CHANGE', data: { id: AGENT, open: false } })).toMatchObject({
      booted: false,
      phase: 'booting',
    });
    expect(fold(initial, { event: 'VSERPORT_CHANGE', data: { id: 'other', open: true } })).toEqual(initial);
  });

  it('tracks the SPICE client of the main channel', () => {
    const connected = fold(initial, { event: 'SPICE_INITIALIZED', data: spiceInfo('40000', 1) });
    expect(connected.consoleClient).toEqual({ host: '10.0.0.9', port: '40000', since: AT });
    expect(fold(initial, { event: 'SPICE_INITIALIZED', data: spiceInfo('40001', 2) })).toEqual(initial);
    expect(
      fold(connected, { event: 'SPICE_DISCONNECTED', data: spiceInfo('40001') }).consoleClient,
    ).toBeDefined();
    expect(
      fold(connected, { event: 'SPICE_DISCONNECTED', data: spiceInfo('40000') }).consoleClient,
    ).toBeUndefined();
  });

  it('ignores events with unexpected data and events it does not know', () => {
    expect(fold(initial, { event: 'BALLOON_CHANGE', data: { actual: 'lots' } })).toEqual(initial);
    expect(fold(initial, { event: 'SHUTDOWN' })).toEqual(initial);
    expect(fold(initial, { event: 'RTC_CHANGE', data: { offset: 1 } })).toEqual(initial);
  });
});

describe('snapshot store', () => {
  it('numbers changes, passes the event along and drops changes that change nothing', () => {
    const published: Array<[RunnerSnapshot, VmEvent]> = [];
    const store = new SnapshotStore(
      initial,
      (snapshot, event) => published.push([snapshot, event]),
      () => new Date(AT),
    );
    store.update((state) => state, { event: 'RUNNER_STARTING' });
    store.update((state) => ({ ...state, cpus: 2 }), { event: 'ACPI_DEVICE_OST' });
    store.update((state) => ({ ...state, cpus: 2 }), { event: 'ACPI_DEVICE_OST' });
    expect(published.map(([snapshot, event]) => [snapshot.seq, snapshot.cpus, event.event])).toEqual([
      [1, 1, 'RUNNER_STARTING'],
      [2, 2, 'ACPI_DEVICE_OST'],
    ]);
    expect(RunnerSnapshot.parse(published[1]![0])).toEqual({ ...initial, cpus: 2, seq: 2, updatedAt: AT });
  });
});
