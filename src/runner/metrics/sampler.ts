// Asks QEMU (QMP), the kernel (/proc) and the guest agent what the VM uses, once per scrape.
import { readFile } from 'node:fs/promises';
import type { z } from 'zod';
import type { QmpExecutor } from '../qmp/commands.js';
import {
  BalloonStats,
  BlockStats,
  CpusFast,
  driveUsage,
  GuestInterfaces,
  guestMemory,
  interfaceUsage,
  procCpuSeconds,
  procResidentBytes,
  RxFilters,
  type VmUsage,
} from './usage.js';

/** The balloon device both templates give the VM; without it the guest's memory is not known. */
const BALLOON_PATH = '/machine/peripheral/balloon0';
/** How often the guest's balloon driver reports its memory (seconds): fresh enough for 15 s scrapes. */
const GUEST_STATS_INTERVAL_SECONDS = 10;
/** A scrape does not wait longer for the guest agent's answer: network counters are left out then. */
const GUEST_AGENT_TIMEOUT_MS = 2_000;

export interface RunningVm {
  qmp: QmpExecutor;
  qemuPid: number;
  /** The guest's interfaces from its agent, undefined while none answers. */
  guestInterfaces(timeoutMs: number): Promise<unknown>;
  guestAgentConnected(): boolean;
  /** When the guest was let run in this pod. */
  runningSince?: Date;
}

async function parsedReply<T extends z.ZodType>(
  qmp: QmpExecutor,
  schema: T,
  command: string,
  args?: Record<string, unknown>,
): Promise<z.infer<T> | undefined> {
  const parsed = schema.safeParse(await qmp.execute(command, args).catch(() => undefined));
  return parsed.success ? parsed.data : undefined;
}

/** Asks the guest's balloon driver to report its memory from now on (once, after QEMU starts). */
export async function enableGuestMemoryStats(qmp: QmpExecutor): Promise<void> {
  await qmp.execute('qom-set', {
    path: BALLOON_PATH,
    property: 'guest-stats-polling-interval',
    value: GUEST_STATS_INTERVAL_SECONDS,
  });
}

export async function sampleVmUsage(vm: RunningVm): Promise<VmUsage> {
  const proc = `/proc/${vm.qemuPid}`;
  const [stat, status, cpus, blocks, balloon, actual, nics, guest] = await Promise.all([
    readFile(`${proc}/stat`, 'utf8'),
    readFile(`${proc}/status`, 'utf8'),
    parsedReply(vm.qmp, CpusFast, 'query-cpus-fast'),
    parsedReply(vm.qmp, BlockStats, 'query-blockstats'),
    parsedReply(vm.qmp, BalloonStats, 'qom-get', { path: BALLOON_PATH, property: 'guest-stats' }),
    vm.qmp.execute<{ actual?: number }>('query-balloon').catch(() => undefined),
    parsedReply(vm.qmp, RxFilters, 'query-rx-filter'),
    vm.guestInterfaces(GUEST_AGENT_TIMEOUT_MS).catch(() => undefined),
  ]);
  const vcpuSeconds = await Promise.all(
    (cpus ?? []).map(async (cpu) => ({
      id: cpu['cpu-index'],
      seconds: procCpuSeconds(await readFile(`${proc}/task/${cpu['thread-id']}/stat`, 'utf8')),
    })),
  );
  const guestNics = GuestInterfaces.safeParse(guest);
  return {
    cpuSeconds: procCpuSeconds(stat),
    vcpuSeconds,
    residentBytes: procResidentBytes(status),
    domainBytes: actual?.actual,
    guestMemory: balloon ? guestMemory(balloon) : {},
    drives: blocks ? driveUsage(blocks) : [],
    interfaces: nics && guestNics.success ? interfaceUsage(nics, guestNics.data) : [],
    guestAgentConnected: vm.guestAgentConnected(),
    uptimeSeconds: vm.runningSince && (Date.now() - vm.runningSince.getTime()) / 1000,
  };
}
