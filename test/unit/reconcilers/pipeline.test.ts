import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { ObjectEvent } from '../../../src/reconcilers/events.js';
import {
  runSteps,
  type PipelineState,
  type Step,
} from '../../../src/reconcilers/virtual-machine/pipeline.js';

const refusal = () => new ApiException(422, 'Unprocessable Entity', { message: 'spec.x: Invalid value' }, {});
const step = (name: string, run: Step<PipelineState>['run'], owned = false): Step<PipelineState> => ({
  name,
  owned,
  run,
});

describe('the VM reconcile pipeline', () => {
  it('runs the steps in order, merging their writes, Events and the soonest requeue', async () => {
    const events: ObjectEvent[] = [];
    const ran: string[] = [];
    const outcome = await runSteps(
      [
        step('a', () => {
          ran.push('a');
          return { writes: ['A'], requeueAfterMs: 5_000 };
        }),
        step('b', () => {
          ran.push('b');
          return { events: [{ type: 'Normal', reason: 'B', message: 'b' }] };
        }),
        step('c', () => {
          ran.push('c');
          return { writes: ['C'], requeueAfterMs: 2_000 };
        }),
      ],
      { specErrors: [] },
      async (event) => void events.push(event),
    );
    expect(ran).toEqual(['a', 'b', 'c']);
    expect(outcome).toEqual({ writes: ['A', 'C'], requeueAfterMs: 2_000 });
    expect(events.map((e) => e.reason)).toEqual(['B']);
  });

  it('a step that ends the reconcile: later steps do not run', async () => {
    const ran: string[] = [];
    const outcome = await runSteps(
      [step('a', () => ({ end: { requeueAfter: 500 } })), step('b', () => void ran.push('b'))],
      { specErrors: [] },
      async () => undefined,
    );
    expect(outcome.end).toEqual({ requeueAfter: 500 });
    expect(ran).toEqual([]);
  });

  it('skips steps that write owned objects while the spec has errors; the others run', async () => {
    const ran: string[] = [];
    await runSteps(
      [step('owned', () => void ran.push('owned'), true), step('status', () => void ran.push('status'))],
      { specErrors: ['spec.vm.currentCpus: 9 exceeds the 4 CPUs'] },
      async () => undefined,
    );
    expect(ran).toEqual(['status']);
  });

  it('an owned write the apiserver refuses: it is kept as `rejected`, the later owned steps are skipped', async () => {
    const ran: string[] = [];
    const state: PipelineState = { specErrors: [] };
    await runSteps(
      [
        step('refused', () => Promise.reject(refusal()), true),
        step('next owned', () => void ran.push('next owned'), true),
        step('status', () => void ran.push('status')),
      ],
      state,
      async () => undefined,
    );
    expect(state.rejected).toMatch(/Invalid value/);
    expect(ran).toEqual(['status']);
  });

  it('any other failure fails the reconcile (the queue retries it)', async () => {
    await expect(
      runSteps(
        [step('a', () => Promise.reject(new Error('ECONNRESET')), true)],
        { specErrors: [] },
        async () => undefined,
      ),
    ).rejects.toThrow('ECONNRESET');
  });
});
