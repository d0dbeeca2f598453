import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    pool: 'forks',
    // Two cores: QEMU under TCG and the control plane are CPU-heavy, so keep parallelism low.
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 300_000,
    teardownTimeout: 60_000,
    projects: [
      // Pure functions: no processes, no control plane.
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      // Real Redis, qemu and one shared control plane for the run.
      {
        extends: true,
        test: {
          name: 'system',
          include: ['test/integration/**/*.test.ts', 'test/e2e/**/*.test.ts'],
          globalSetup: ['test/support/global-control-plane.ts'],
        },
      },
    ],
  },
});
