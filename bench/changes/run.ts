// npm run bench:changes — how long a runtime change (currentRam, currentCpus) takes on a real node:
// patch → the guest has it (the runner's snapshot shows what qemu reports of the guest) → the
// VirtualMachine's status shows it. Once with vmop's pod annotation nudge, once with kubelet's own
// ConfigMap volume sync (what users get without it), in one run; ratios against the latter.
// Everything real: the single-node cluster, Redis, two managers, test guests under TCG.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { Redis } from 'ioredis';
import { parseMemorySize } from '../../src/api/runner-config.js';
import { GROUP, PLURAL, VERSION } from '../../src/api/virtual-machine.js';
import { startDevEnvironment } from '../../src/devenv/dev-environment.js';
import { snapshotRedisKey } from '../../src/api/runner-snapshot.js';
import { createLogger } from '../../src/util/logger.js';
import { testGuestManifest } from '../../test/support/cluster-vms.js';
import { applyObjects } from '../../src/devenv/cluster.js';
import { parse } from 'yaml';

const VMS = Number(process.env.BENCH_VMS ?? 10);
const CHANGES = Number(process.env.BENCH_CHANGES ?? 100);
const BASELINE_CHANGES = Number(process.env.BENCH_BASELINE_CHANGES ?? CHANGES);
const NAMESPACE = 'default';
const logger = createLogger('bench');
logger.level = 'warn';

interface Method {
  name: string;
  managerArgs: string[];
  changes: number;
  timeoutMs: number;
}

// Ten TCG test guests on a 2-core node: by default each would request half a CPU (plus the runner's).
const OVERCOMMIT = ['--cpu-overcommit', '20'];
const METHODS: Method[] = [
  { name: 'pod annotation nudge (vmop)', managerArgs: OVERCOMMIT, changes: CHANGES, timeoutMs: 60_000 },
  {
    name: "kubelet's own sync (no nudge)",
    managerArgs: [...OVERCOMMIT, '--no-config-nudge'],
    changes: BASELINE_CHANGES,
    timeoutMs: 300_000,
  },
];

interface Sample {
  guestMs: number;
  statusMs: number;
}

/** The n-th change of a VM: RAM down/up on even steps, a CPU plugged in/out on odd ones. */
function change(step: number): { spec: object; ram?: number; cpus?: number } {
  if (step % 2 === 0) {
    const ram = step % 4 === 0 ? '192Mi' : '256Mi';
    return { spec: { currentRam: ram }, ram: parseMemorySize(ram)! };
  }
  const cpus = step % 4 === 1 ? 2 : 1;
  return { spec: { currentCpus: cpus }, cpus };
}

const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
};

async function measure(method: Method): Promise<Sample[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-bench-changes-'));
  const environment = await startDevEnvironment({ dir, managerArgs: method.managerArgs, logger });
  const redis = new Redis(environment.state.redisUrl);
  const api = environment.cluster.kubeConfig.makeApiClient(CustomObjectsApi);
  const ref = (name: string) => ({
    group: GROUP,
    version: VERSION,
    plural: PLURAL,
    namespace: NAMESPACE,
    name,
  });
  const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  type VmObject = {
    status?: { ram?: string; cpus?: number; conditions?: Array<{ type: string; status: string }> };
  };
  const readVm = async (name: string) => (await api.getNamespacedCustomObject(ref(name))) as VmObject;
  const readSnapshot = async (name: string) => {
    const text = await redis.get(snapshotRedisKey(`vm:${NAMESPACE}/${name}`));
    return text ? (JSON.parse(text) as { ram: number; cpus: number }) : undefined;
  };
  const samples: Sample[] = [];
  try {
    const names = Array.from({ length: VMS }, (_, i) => `bench-${i}`);
    await applyObjects(
      environment.cluster.kubeConfig,
      names.map((name) => parse(testGuestManifest(name, NAMESPACE))),
    );
    for (const name of names) {
      const deadline = Date.now() + 300_000;
      while (
        !(await readVm(name)).status?.conditions?.some((c) => c.type === 'Booted' && c.status === 'True')
      ) {
        if (Date.now() > deadline) throw new Error(`${name} did not boot`);
        await sleep(500);
      }
    }
    const perVm = Math.ceil(method.changes / VMS);
    process.stderr.write(`${method.name}: ${VMS} VMs booted, ${perVm} changes each\n`);
    await Promise.all(
      names.map(async (name) => {
        for (let step = 0; step < perVm && samples.length < method.changes; step++) {
          const { spec, ram, cpus } = change(step);
          const has = (state: { ram?: number; cpus?: number } | undefined) =>
            state !== undefined &&
            (ram === undefined || state.ram === ram) &&
            (cpus === undefined || state.cpus === cpus);
          const shown = (vm: VmObject) =>
            (ram === undefined || parseMemorySize(vm.status?.ram ?? '') === ram) &&
            (cpus === undefined || vm.status?.cpus === cpus);
          const start = performance.now();
          await api.patchNamespacedCustomObject({ ...ref(name), body: { spec: { vm: spec } } }, mergePatch);
          let guestMs: number | undefined;
          let statusMs: number | undefined;
          while (guestMs === undefined || statusMs === undefined) {
            if (performance.now() - start > method.timeoutMs)
              throw new Error(`${name}: ${JSON.stringify(spec)} not applied after ${method.timeoutMs} ms`);
            if (guestMs === undefined && has(await readSnapshot(name))) guestMs = performance.now() - start;
            if (statusMs === undefined && shown(await readVm(name))) statusMs = performance.now() - start;
            await sleep(20);
          }
          samples.push({ guestMs, statusMs: Math.max(statusMs, guestMs) });
        }
      }),
    );
  } finally {
    redis.disconnect();
    await environment.stop();
    await rm(dir, { recursive: true, force: true });
  }
  return samples;
}

const results: Array<{ method: Method; samples: Sample[] }> = [];
for (const method of METHODS) results.push({ method, samples: await measure(method) });

const baseline = results.at(-1)!.samples;
const fmt = (ms: number) => (ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${ms.toFixed(0)} ms`);
console.log(`\nRuntime changes on a real node (${VMS} test guests under TCG, 2 manager replicas)\n`);
console.log(
  '| method | changes | patch→guest p50 | p99 | patch→status p50 | p99 | status p50 / no nudge | p99 / no nudge |',
);
console.log('|---|---|---|---|---|---|---|---|');
for (const { method, samples } of results) {
  const guest = samples.map((s) => s.guestMs);
  const status = samples.map((s) => s.statusMs);
  const ratio = (q: number) =>
    (
      quantile(status, q) /
      quantile(
        baseline.map((s) => s.statusMs),
        q,
      )
    ).toFixed(3);
  console.log(
    `| ${method.name} | ${samples.length} | ${fmt(quantile(guest, 0.5))} | ${fmt(quantile(guest, 0.99))} | ` +
      `${fmt(quantile(status, 0.5))} | ${fmt(quantile(status, 0.99))} | ${ratio(0.5)} | ${ratio(0.99)} |`,
  );
}
