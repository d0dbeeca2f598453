// npm run bench:runner-metrics — what a runner's /metrics costs: each scrape's time and the CPU it
// takes from the runner and QEMU, against the same runner left alone (the baseline) in one run.
// Real parts: the runner from source, QEMU under TCG with the test guest, its guest agent.
// Prints per-scrape costs and the runner's CPU per 15 s (Prometheus' usual interval) with and
// without one scrape in it.
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../src/util/free-port.js';
import {
  configYaml,
  makeEmptyDisk,
  makeImageRepository,
  makeTempDir,
  MiB,
  startRunner,
  waitForConsoleLog,
} from '../../test/integration/runner/harness.js';
import { quantile } from '../support/quantile.js';
import { processCpuSeconds as cpuSeconds } from '../support/cpu-usage.js';

const SCRAPES = Number(process.env.BENCH_SCRAPES ?? 60);
const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 60);
const INTERVAL_SECONDS = 15;

const tmp = await makeTempDir('bench-runner-metrics');
const disk = await makeEmptyDisk(path.join(tmp, 'disk.img'), 32 * MiB);
const port = await freePort();
const configFile = path.join(tmp, 'config.yaml');
await writeFile(
  configFile,
  configYaml({
    '/Runner': {
      dataDir: path.join(tmp, 'data'),
      runtimeDir: path.join(tmp, 'run'),
      template: 'test-guest.liquid',
      imageRepository: await makeImageRepository(path.join(tmp, 'images')),
      vm: {
        name: 'bench',
        maximumRam: '256Mi',
        network: [{ type: 'user' }],
        drives: [{ type: 'raw', file: disk }],
      },
    },
  }),
);
const runner = await startRunner(configFile, {
  env: { ...process.env, VMOP_METRICS_PORT: String(port), VMOP_VM_KEY: 'vm:bench/bench' },
});
try {
  await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
  const { qemuPid } = await runner.waitForSnapshot((s) => s.guestAgent?.connected === true, 120_000);
  const scrape = async () => (await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()).length;
  await scrape(); // the first one loads what a scrape needs
  await sleep(5_000); // the guest settles after its agent connected

  const measure = async (what: () => Promise<void>) => {
    const runnerBefore = cpuSeconds(runner.pid);
    const qemuBefore = cpuSeconds(qemuPid!);
    const started = performance.now();
    await what();
    return {
      seconds: (performance.now() - started) / 1000,
      runner: cpuSeconds(runner.pid) - runnerBefore,
      qemu: cpuSeconds(qemuPid!) - qemuBefore,
    };
  };
  const idle = await measure(() => sleep(IDLE_SECONDS * 1000));
  const times: number[] = [];
  let bytes = 0;
  const scraping = await measure(async () => {
    for (let i = 0; i < SCRAPES; i++) {
      const started = performance.now();
      bytes = await scrape();
      times.push(performance.now() - started);
    }
  });
  const idleRunnerPerInterval = (idle.runner / idle.seconds) * INTERVAL_SECONDS;
  const perScrape = {
    runner: (scraping.runner - (idle.runner / idle.seconds) * scraping.seconds) / SCRAPES,
    qemu: (scraping.qemu - (idle.qemu / idle.seconds) * scraping.seconds) / SCRAPES,
  };
  const ms = (seconds: number) => `${(seconds * 1000).toFixed(1)} ms`;
  console.log(`runner /metrics of one test guest (TCG), ${SCRAPES} scrapes, a page of ${bytes} bytes`);
  console.log(
    `  scrape time: min ${times.length && Math.min(...times).toFixed(1)} ms, median ${quantile(times, 0.5).toFixed(1)} ms, p99 ${quantile(times, 0.99).toFixed(1)} ms`,
  );
  console.log(
    `  CPU per scrape: runner ${ms(perScrape.runner)}, QEMU ${ms(perScrape.qemu)} (beyond their idle use)`,
  );
  console.log(
    `  runner CPU per ${INTERVAL_SECONDS} s: left alone (baseline) ${ms(idleRunnerPerInterval)}, with one scrape ${ms(idleRunnerPerInterval + perScrape.runner)}: ratio ${((idleRunnerPerInterval + perScrape.runner) / idleRunnerPerInterval).toFixed(2)}`,
  );
  console.log(
    `  one scrape per ${INTERVAL_SECONDS} s takes ${(((perScrape.runner + perScrape.qemu) / INTERVAL_SECONDS) * 100).toFixed(3)} % of a core (runner and QEMU)`,
  );
} finally {
  await runner.stop();
  await rm(tmp, { recursive: true, force: true });
}
