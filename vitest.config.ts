import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-control-plane.ts'],
    pool: 'forks',
    // Two cores: QEMU under TCG and the control plane are CPU-heavy, so keep parallelism low.
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 300_000,
    teardownTimeout: 60_000,
  },
});
