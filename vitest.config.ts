import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    pool: 'forks',
    // Two cores: QEMU under TCG and the control plane are CPU-heavy, so keep parallelism low.
    maxWorkers: 2,
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
      // A whole cluster each (control plane, kubelet, containerd, images): one file at a time,
      // after the others, so TCG guests get the machine's two cores.
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
          testTimeout: 300_000,
          hookTimeout: 1_800_000,
        },
      },
      // Faults injected into a whole cluster (test/faults): last, alone, for the same reason.
      {
        extends: true,
        test: {
          name: 'faults',
          include: ['test/faults/**/*.test.ts'],
          maxWorkers: 1,
          sequence: { groupOrder: 2 },
          testTimeout: 600_000,
          hookTimeout: 1_800_000,
        },
      },
    ],
  },
});
