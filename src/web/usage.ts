// The cluster's use of CPUs and RAM over the last 24 h, for the admin view's chart. Every replica
// samples its watch cache into one Redis stream whose entry IDs are the sample's time slot, so a
// slot two replicas sample is written once (Redis refuses an ID not above the newest).
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { parseMemorySize } from '../api/runner-config.js';
import { KIND } from '../api/virtual-machine.js';
import type { ObjectCache } from '../kube/object-cache.js';
import type { Logger } from '../util/logger.js';

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
export interface UsageSample extends Usage {
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

export function usageHistory(redis: Redis, cache: ObjectCache, sampleSeconds: number, logger: Logger) {
  const slotMs = sampleSeconds * 1000;

  async function sample(now = Date.now()): Promise<void> {
    const slot = now - (now % slotMs);
    const { vms, cpus, ramBytes } = usageOf(cache.list<VmStatusFields>(KIND, undefined));
    try {
      await redis.xadd(
        USAGE_KEY,
        'MINID',
        String(now - HISTORY_MS),
        `${slot}-0`,
        ...['vms', vms, 'cpus', cpus, 'ram', ramBytes].map(String),
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
        const value = (name: string) => Number(fields[fields.indexOf(name) + 1] ?? 0);
        return {
          t: Number(id.split('-')[0]),
          vms: value('vms'),
          cpus: value('cpus'),
          ramBytes: value('ram'),
        };
      });
    },
  };
}
export type UsageHistory = ReturnType<typeof usageHistory>;
