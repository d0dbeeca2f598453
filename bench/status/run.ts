// npm run bench:status — how long a runner's snapshot change takes to show in the VirtualMachine's
// status, with 1 and 2 manager replicas, next to the queue's own enqueue-to-start latency.
// BENCH_FLOOD=1: each replica count also with another namespace's runner key written in a flood
// meanwhile (issue 53), and the ratio of the two in this run.
import { startControlPlane } from '../../src/devenv/control-plane.js';
import { installCrds } from '../../src/devenv/install-crds.js';
import { createLogger } from '../../src/util/logger.js';
import { describeCpu } from '../support/cpu-usage.js';
import { measureStatusLatency, type StatusLatency, type StatusLoad } from './measure.js';

const CHANGES = Number(process.env.BENCH_CHANGES ?? 500);
const VMS = Number(process.env.BENCH_VMS ?? 10);
const REPLICAS = (process.env.BENCH_REPLICAS ?? '1,2').split(',').map(Number);
/** closed: each VM publishes again once its change shows; boots: VMs publish as booting runners do. */
const LOAD: StatusLoad =
  process.env.BENCH_LOAD === 'boots'
    ? { kind: 'boots', seconds: Number(process.env.BENCH_SECONDS ?? 60) }
    : { kind: 'closed', changes: CHANGES };
const FLOOD = process.env.BENCH_FLOOD === '1';
const logger = createLogger('bench', {});
logger.level = 'warn';

const controlPlane = await startControlPlane({ logger });
try {
  await installCrds(controlPlane.kubeConfig);
  const rows: StatusLatency[] = [];
  for (const replicas of REPLICAS)
    for (const flood of FLOOD ? [false, true] : [false])
      rows.push(
        await measureStatusLatency(controlPlane.kubeConfig, controlPlane.kubeconfigPath, {
          replicas,
          vms: VMS,
          load: LOAD,
          flood,
        }),
      );
  const ms = (value: number) => (Number.isNaN(value) ? 'n/a' : `${value.toFixed(1)} ms`);
  console.log(`\nSnapshot change → VirtualMachine status (${VMS} VMs publishing, load ${LOAD.kind})\n`);
  console.log(
    '| manager replicas | changes | never shown | status writes/change | status p50 | status p99 | queue enqueue→start p50 | p99 | reconcile p50 | p99 | manager CPU/change | apiserver CPU/status write | cores busy |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(
      `| ${r.replicas}${r.flood ? ` (flood: ${Math.round(r.flood.writesPerSecond / 1000)}k SETs/s taken, ${r.flood.refusedBatches} batches refused)` : ''} | ${r.changes} | ${r.lost} | ${r.statusWritesPerChange.toFixed(2)} | ${ms(r.statusP50)} | ${ms(r.statusP99)} | ${ms(r.queueP50)} | ${ms(r.queueP99)} | ${ms(r.handlerP50)} | ${ms(r.handlerP99)} | ${ms(r.managerCpuMsPerChange)} | ${ms(r.apiserverCpuMsPerStatusWrite)} | ${describeCpu(r.cpu)} |`,
    );
  }
  if (FLOOD)
    for (const replicas of REPLICAS) {
      const [calm, flooded] = rows.filter((r) => r.replicas === replicas);
      console.log(
        `\nratio flood / no flood, ${replicas} replica(s): p50 ${(flooded!.statusP50 / calm!.statusP50).toFixed(2)}, p99 ${(flooded!.statusP99 / calm!.statusP99).toFixed(2)}`,
      );
    }
  const [one, two] = FLOOD ? [] : rows;
  if (one && two)
    console.log(
      `\nratio 2 replicas / 1 replica: p50 ${(two.statusP50 / one.statusP50).toFixed(2)}, p99 ${(two.statusP99 / one.statusP99).toFixed(2)}`,
    );
  console.log("(queue quantiles interpolated from the managers' histogram buckets)");
} finally {
  await controlPlane.stop();
}
