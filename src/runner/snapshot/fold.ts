import type { z } from 'zod';
import type { RunnerSnapshot } from '../../api/runner-snapshot.js';
import {
  BalloonChangeData,
  ShutdownData,
  SpiceConnectionData,
  SpiceInitializedData,
  TrayMovedData,
  VserportChangeData,
  type VmEvent,
} from '../qmp/events.js';

/** The snapshot without the fields the store stamps on publishing. */
export type SnapshotState = Omit<RunnerSnapshot, 'seq' | 'updatedAt'>;

/** SPICE's main channel; its client stands for "someone has the console open". */
const SPICE_MAIN_CHANNEL = 1;

function dataOf<T extends z.ZodType>(schema: T, event: VmEvent): z.infer<T> | undefined {
  const result = schema.safeParse(event.data);
  return result.success ? result.data : undefined;
}

/**
 * Folds a QMP event into the snapshot (pure). Events whose data does not have the expected shape
 * leave the snapshot unchanged.
 */
export function foldEvent(
  state: SnapshotState,
  event: VmEvent,
  at: string,
  agentPortId: string,
): SnapshotState {
  switch (event.event) {
    case 'SHUTDOWN': {
      const data = dataOf(ShutdownData, event);
      if (!data) return state;
      const phase = state.phase === 'failed' || state.phase === 'stopped' ? state.phase : 'stopping';
      return { ...state, phase, lastShutdown: { guest: data.guest, reason: data.reason, at } };
    }
    case 'BALLOON_CHANGE': {
      const data = dataOf(BalloonChangeData, event);
      return data ? { ...state, ram: data.actual } : state;
    }
    case 'DEVICE_TRAY_MOVED': {
      const data = dataOf(TrayMovedData, event);
      const drive = data ? state.drives[data.id] : undefined;
      if (!data || !drive) return state;
      const tray = data['tray-open'] ? 'open' : 'closed';
      return { ...state, drives: { ...state.drives, [data.id]: { ...drive, tray } } };
    }
    case 'VSERPORT_CHANGE': {
      const data = dataOf(VserportChangeData, event);
      if (!data || data.id !== agentPortId) return state;
      let phase = state.phase;
      if (data.open && phase === 'booting') phase = 'running';
      if (!data.open && phase === 'running') phase = 'booting';
      return { ...state, booted: data.open, phase };
    }
    case 'SPICE_INITIALIZED': {
      const data = dataOf(SpiceInitializedData, event);
      if (!data || data.client['channel-type'] !== SPICE_MAIN_CHANNEL) return state;
      return { ...state, consoleClient: { host: data.client.host, port: data.client.port, since: at } };
    }
    case 'SPICE_DISCONNECTED': {
      const data = dataOf(SpiceConnectionData, event);
      const client = state.consoleClient;
      if (!data || !client || client.host !== data.client.host || client.port !== data.client.port)
        return state;
      return { ...state, consoleClient: undefined };
    }
    default:
      return state;
  }
}
