// npm run bench:failover — what a Redis failover does to status latency (issue 27 §3): VMs publish
// as booting runners do through the Sentinel set `vmop dev --redis sentinel` runs, once as they
// are (the baseline) and once with the master SIGKILLed mid-run. Prints both and their ratio.
import { startControlPlane } from '../../src/devenv/control-plane.js';
import { installCrds } from '../../src/devenv/install-crds.js';
import { createLogger } from '../../src/util/logger.js';
import { FAILOVER_WINDOW_MS, measureStatusLatency, type StatusLatency } from '../status/measure.js';

const VMS = Number(process.env.BENCH_VMS ?? 100);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const REPLICAS = Number(process.env.BENCH_REPLICAS ?? 2);
const KILL_AT_SECONDS = Number(process.env.BENCH_KILL_AT_SECONDS ?? 20);
const logger = createLogger('bench', {});
logger.level = 'warn';

const controlPlane = await startControlPlane({ logger });
try {
  await installCrds(controlPlane.kubeConfig);
  const measure = (killMasterAtSeconds?: number) =>
    measureStatusLatency(controlPlane.kubeConfig, controlPlane.kubeconfigPath, {
      replicas: REPLICAS,
      vms: VMS,
      load: { kind: 'boots', seconds: SECONDS },
      redis: 'sentinel',
      killMasterAtSeconds,
    });
  const baseline = await measure();
  const failover = await measure(KILL_AT_SECONDS);
  const ms = (value: number | undefined) =>
    value === undefined || Number.isNaN(value) ? 'n/a' : `${value.toFixed(0)} ms`;
  const row = (label: string, r: StatusLatency) =>
    `| ${label} | ${r.changes} | ${r.lost} | ${r.statusWritesPerChange.toFixed(2)} | ${ms(r.statusP50)} | ${ms(r.statusP99)} | ` +
    `${r.failover ? `${r.failover.changes} / ${r.failover.lost}` : '–'} | ${ms(r.failover?.statusP99)} | ${ms(r.failover?.statusMax)} |`;
  console.log(
    `\nSnapshot change → status, ${VMS} VMs booting for ${SECONDS} s, ${REPLICAS} manager replicas, Redis with Sentinel (3 s down-after)\n`,
  );
  console.log(
    `| run | changes | never shown | status writes/change | status p50 | status p99 | changes in the ${FAILOVER_WINDOW_MS / 1000} s after the kill / never shown | their p99 | their max |`,
  );
  console.log('|---|---|---|---|---|---|---|---|---|');
  console.log(row('no failover (baseline)', baseline));
  console.log(row(`master SIGKILLed at ${KILL_AT_SECONDS} s`, failover));
  console.log(
    `\nratio failover / baseline: status p99 ${(failover.statusP99 / baseline.statusP99).toFixed(2)}; ` +
      `p99 of the changes published during the failover / baseline p99 ${((failover.failover?.statusP99 ?? NaN) / baseline.statusP99).toFixed(2)}`,
  );
} finally {
  await controlPlane.stop();
}
