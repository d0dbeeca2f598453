import type { RunnerSnapshot } from '../../api/runner-snapshot.js';
import type { VmEvent } from '../qmp/events.js';
import type { SnapshotState } from './fold.js';

export type PublishSnapshot = (snapshot: RunnerSnapshot, event: VmEvent) => void;

/**
 * Holds what the runner knows. Every change gets the next sequence number and is handed to
 * `publish` together with the event that caused it; a change that changes nothing is dropped.
 */
export class SnapshotStore {
  private current: RunnerSnapshot;

  constructor(
    initial: SnapshotState,
    private readonly publish: PublishSnapshot,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.current = { ...initial, seq: 0, updatedAt: this.now().toISOString() };
  }

  get snapshot(): RunnerSnapshot {
    return this.current;
  }

  update(change: (state: SnapshotState) => SnapshotState, event: VmEvent): void {
    const { seq, updatedAt: _updatedAt, ...state } = this.current;
    const next = change(state);
    if (seq > 0 && JSON.stringify(next) === JSON.stringify(state)) return;
    this.current = { ...next, seq: seq + 1, updatedAt: this.now().toISOString() };
    this.publish(this.current, event);
  }
}
