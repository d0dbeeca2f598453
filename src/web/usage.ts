// The cluster's CPUs and RAM over the last 24 h, for the admin view's chart: what the VMs hold
// (their status, from the watch cache) and what they use (the latest samples their runners keep,
// api/vm-usage-history.ts). Every replica samples into one Redis stream whose entry IDs are the
// sample's time slot, so a slot two replicas sample is written once (Redis refuses an ID not
// above the newest).
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { parseMemorySize } from '../api/runner-config.js';
import { KIND } from '../api/virtual-machine.js';
import type { ObjectCache } from '../kube/object-cache.js';
import type { Logger } from '../util/logger.js';
import {
  USAGE_SAMPLE_SECONDS,
  usageHistoryKey,
  parseUsageHistory,
  type VmUsageSample,
} from '../api/vm-usage-history.js';
import { vmKey } from '../reconcilers/virtual-machine/naming.js';
import { usagePoints } from './vm-details.js';

export const USAGE_KEY = 'vmop:web:usage';
export const HISTORY_MS = 24 * 3600 * 1000;
/** The phases in which a VM's CPUs and RAM are taken on a node. */
const IN_USE = new Set(['Running', 'Migrating', 'Stopping']);

export interface Usage {
  /** VMs that hold CPUs and RAM on a node (running, migrating or stopping). */
  vms: number;
  cpus: number;
  ramBytes: number;
}
/** What the VMs use: CPU cores busy, and the memory their QEMUs take from the nodes. */
export interface Used {
  cpusUsed: number;
  ramUsedBytes: number;
}
export interface UsageSample extends Usage, Used {
  /** Milliseconds since the epoch: the start of the sample's slot. */
  t: number;
}

type VmStatusFields = KubernetesObject & { status?: { phase?: string; cpus?: number; ram?: string } };

/** What the VMs take, by their status (pure). */
export function usageOf(vms: VmStatusFields[]): Usage {
  const usage: Usage = { vms: 0, cpus: 0, ramBytes: 0 };
  for (const { status } of vms) {
    if (!status?.phase || !IN_USE.has(status.phase)) continue;
    usage.vms += 1;
    usage.cpus += status.cpus ?? 0;
    usage.ramBytes += (status.ram && parseMemorySize(status.ram)) || 0;
  }
  return usage;
}

/** What QEMU may take beyond the guest's RAM (its own code, buffers, the TPM's): a bound, no estimate. */
const QEMU_OVERHEAD_BYTES = 1024 ** 3;

/**
 * What the VMs use now, from each one's two latest samples (newest first): its CPU rate between
 * them and its memory in the newest. A VM whose newest sample is older than three periods (its
 * runner does not record) or from the future counts nothing. The samples are written with the
 * namespace's runner credential, so its people could write any numbers: each VM counts at most
 * the CPUs and RAM it has (`has`, by its status). Pure.
 */
export function usedOf(
  latest: VmUsageSample[][],
  has: Array<{ cpus: number; ramBytes: number }>,
  now: number,
): Used {
  const used: Used = { cpusUsed: 0, ramUsedBytes: 0 };
  const within = (value: number | undefined, most: number) =>
    Number.isFinite(value) ? Math.min(Math.max(value!, 0), most) : 0;
  latest.forEach(([newest, before], i) => {
    const age = now - (newest?.t ?? 0);
    if (!newest || age > 3 * USAGE_SAMPLE_SECONDS * 1000 || age < -USAGE_SAMPLE_SECONDS * 1000) return;
    const { cpus, ramBytes } = has[i] ?? { cpus: 0, ramBytes: 0 };
    used.ramUsedBytes += within(newest.record.resident, ramBytes + QEMU_OVERHEAD_BYTES);
    if (before)
      used.cpusUsed += within(usagePoints([before, newest], USAGE_SAMPLE_SECONDS)[1]!.cpuCores, cpus);
  });
  return used;
}

/** The two latest samples of each VM, in one round trip. */
async function latestSamples(redis: Redis, vms: VmStatusFields[]) {
  const pipeline = redis.pipeline();
  for (const vm of vms) pipeline.get(usageHistoryKey(vmKey(vm.metadata!.namespace!, vm.metadata!.name!)));
  const replies = (await pipeline.exec()) ?? [];
  return replies.map(([err, text]) =>
    err
      ? []
      : parseUsageHistory(text as string | null)
          .slice(-2)
          .reverse(),
  );
}

export function usageHistory(redis: Redis, cache: ObjectCache, sampleSeconds: number, logger: Logger) {
  const slotMs = sampleSeconds * 1000;

  async function sample(now = Date.now()): Promise<void> {
    const slot = now - (now % slotMs);
    const all = cache.list<VmStatusFields>(KIND, undefined);
    const { vms, cpus, ramBytes } = usageOf(all);
    const inUse = all.filter((vm) => vm.status?.phase && IN_USE.has(vm.status.phase));
    const { cpusUsed, ramUsedBytes } = usedOf(
      await latestSamples(redis, inUse),
      inUse.map((vm) => usageOf([vm])),
      now,
    );
    try {
      await redis.xadd(
        USAGE_KEY,
        'MINID',
        String(now - HISTORY_MS),
        `${slot}-0`,
        ...['vms', vms, 'cpus', cpus, 'ram', ramBytes, 'cpusUsed', cpusUsed, 'ramUsed', ramUsedBytes].map(
          String,
        ),
      );
    } catch (err) {
      // Another replica sampled this slot first.
      if (!/equal or smaller than the target stream top item/.test((err as Error).message)) throw err;
    }
  }

  let timer: NodeJS.Timeout | undefined;
  const sampleLogged = () =>
    sample().catch((err: unknown) =>
      logger.warn({ err: (err as Error).message }, 'sampling the usage failed'),
    );

  return {
    sampleSeconds,
    sample,
    /** Samples now (once the cache is filled) and then every slot. */
    start() {
      void sampleLogged();
      timer = setInterval(sampleLogged, slotMs);
      timer.unref();
    },
    stop: () => clearInterval(timer),
    async read(now = Date.now()): Promise<UsageSample[]> {
      const entries = await redis.xrange(USAGE_KEY, String(now - HISTORY_MS), '+');
      return entries.map(([id, fields]) => {
        // Entries written before a field existed lack it: 0.
        const value = (name: string) => {
          const at = fields.indexOf(name);
          return at < 0 ? 0 : Number(fields[at + 1]);
        };
        return {
          t: Number(id.split('-')[0]),
          vms: value('vms'),
          cpus: value('cpus'),
          ramBytes: value('ram'),
          cpusUsed: value('cpusUsed'),
          ramUsedBytes: value('ramUsed'),
        };
      });
    },
  };
}
export type UsageHistory = ReturnType<typeof usageHistory>;
