import { defineConfig } from 'vitest/config';
import BedSequencer from './test/support/bed-sequencer.js';

export default defineConfig({
  test: {
    pool: 'forks',
    // Every run ends with each tier's time and the slowest files (test/support/time-report.ts).
    reporters: ['default', './test/support/time-report.ts'],
    // Unit files, then two bed files and the integration files beside them, then the last bed
    // (test/support/bed-sequencer.ts).
    sequence: { sequencer: BedSequencer },
    // Two cores, three workers: two of them hold a bed each for most of the run, and a bed mostly
    // waits (a run here used 64% of the CPU with two beds); every tier is one group, one queue.
    // Four workers (all three beds from the start) made the run 7% longer: the cores were saturated.
    maxWorkers: 3,
    testTimeout: 120_000,
    hookTimeout: 300_000,
    teardownTimeout: 60_000,
    // expect.poll's own default (1 s) fails on a loaded two-core machine where a page takes
    // seconds to load (CI once saw the queue dashboard still "Loading..." after 1 s).
    expect: { poll: { timeout: 30_000 } },
    projects: [
      // Pure functions: no processes, no control plane.
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      // Real Redis, qemu and one shared control plane (no node) for the run.
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          globalSetup: ['test/support/global-control-plane.ts'],
        },
      },
      // Whole clusters (control plane, kubelets, containerd, images, VMs under TCG), shared by the
      // suites of a kind: each bed file (test/e2e/*-bed.test.ts, see test/support/beds.ts) runs its
      // suites on one. The fault suite (test/faults) runs last on the dev bed.
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/e2e/*-bed.test.ts'],
          testTimeout: 300_000,
          hookTimeout: 1_800_000,
        },
      },
    ],
  },
});
