// npm run bench:status — how long a runner's snapshot change takes to show in the VirtualMachine's
// status, with 1 and 2 manager replicas, next to the queue's own enqueue-to-start latency.
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
const logger = createLogger('bench', {});
logger.level = 'warn';

const controlPlane = await startControlPlane({ logger });
try {
  await installCrds(controlPlane.kubeConfig);
  const rows: StatusLatency[] = [];
  for (const replicas of REPLICAS)
    rows.push(
      await measureStatusLatency(controlPlane.kubeConfig, controlPlane.kubeconfigPath, {
        replicas,
        vms: VMS,
        load: LOAD,
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
      `| ${r.replicas} | ${r.changes} | ${r.lost} | ${r.statusWritesPerChange.toFixed(2)} | ${ms(r.statusP50)} | ${ms(r.statusP99)} | ${ms(r.queueP50)} | ${ms(r.queueP99)} | ${ms(r.handlerP50)} | ${ms(r.handlerP99)} | ${ms(r.managerCpuMsPerChange)} | ${ms(r.apiserverCpuMsPerStatusWrite)} | ${describeCpu(r.cpu)} |`,
    );
  }
  const [one, two] = rows;
  if (one && two)
    console.log(
      `\nratio 2 replicas / 1 replica: p50 ${(two.statusP50 / one.statusP50).toFixed(2)}, p99 ${(two.statusP99 / one.statusP99).toFixed(2)}`,
    );
  console.log("(queue quantiles interpolated from the managers' histogram buckets)");
} finally {
  await controlPlane.stop();
}
