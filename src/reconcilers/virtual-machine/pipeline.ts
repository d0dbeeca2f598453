// The VM reconcile as named steps in a fixed order (steps.ts), after Deckhouse's VM
// controller: one state object, each step owns one concern and says what it wrote, which Events it
// has to tell, and when to look again; the pipeline merges that. No framework: a loop.
import type { HandlerResult } from '../../queue/index.js';
import { apiserverRejection } from '../../kube/clients.js';
import type { ObjectEvent } from '../events.js';

/** A status write refused for an older resourceVersion: reconcile again on the newer VM. */
export const STATUS_CONFLICT = Symbol('status conflict');
export type ReconcileEnd = HandlerResult | typeof STATUS_CONFLICT;

export interface StepResult {
  /** What the step wrote, for the reconcile's log line. */
  writes?: string[];
  /** Events to record on the VM, right after the step. */
  events?: ObjectEvent[];
  /** Look again after this long (the pipeline keeps the soonest). */
  requeueAfterMs?: number;
  /** End the reconcile here with this result: later steps do not run. */
  end?: ReconcileEnd;
}

/** What every step's state has: what the pipeline reads to skip steps. */
export interface PipelineState {
  /** Spec problems the CRD cannot catch: objects the VM owns are left as they are. */
  specErrors: string[];
  /** The apiserver's refusal of a write (retrying cannot help): later owned writes are skipped. */
  rejected?: string;
}

export interface Step<S extends PipelineState> {
  readonly name: string;
  /**
   * It writes objects the VM owns: skipped while the spec has errors or after a refusal, and a
   * refusal of its writes (apiserverRejection) goes into `rejected` instead of failing the reconcile.
   */
  readonly owned?: boolean;
  run(state: S): StepResult | void | Promise<StepResult | void>;
}

export interface PipelineOutcome {
  writes: string[];
  requeueAfterMs?: number;
  end?: ReconcileEnd;
}

/** The sooner of two requeue times (either may be absent). */
export const sooner = (a: number | undefined, b: number | undefined) =>
  a === undefined ? b : b === undefined ? a : Math.min(a, b);

/** Runs `steps` in order on `state`; `record` tells a step's Events. */
export async function runSteps<S extends PipelineState>(
  steps: ReadonlyArray<Step<S>>,
  state: S,
  record: (event: ObjectEvent) => Promise<void>,
): Promise<PipelineOutcome> {
  const outcome: PipelineOutcome = { writes: [] };
  for (const step of steps) {
    if (step.owned && (state.specErrors.length > 0 || state.rejected !== undefined)) continue;
    let result: StepResult | void;
    try {
      result = await step.run(state);
    } catch (err) {
      const refused = step.owned ? apiserverRejection(err) : undefined;
      if (refused === undefined) throw err;
      state.rejected = refused;
      continue;
    }
    if (!result) continue;
    outcome.writes.push(...(result.writes ?? []));
    for (const event of result.events ?? []) await record(event);
    outcome.requeueAfterMs = sooner(outcome.requeueAfterMs, result.requeueAfterMs);
    if (result.end !== undefined) return { ...outcome, end: result.end };
  }
  return outcome;
}
