import { formatFieldPath, type RunnerConfig } from '../api/runner-config.js';
import { cdDriveId, diskId } from './drives.js';

/** Changes the runner applies to the running VM. */
export interface LiveChanges {
  currentCpus?: number;
  currentRam?: number;
  powerdownTimeout?: number;
  /** New media by CD drive id; '' ejects. */
  cdMedia: Array<{ id: string; image: string }>;
  /** Disks whose volume grew, by disk id (the QEMU node name), with their new size. */
  diskSizes: Array<{ id: string; bytes: number }>;
  /** Who the guest's vmop agent is to log in (undefined: log out), when that changed. */
  loggedInUser?: string | undefined;
}

const effectiveRam = (config: RunnerConfig) =>
  config['/Runner'].vm.currentRam ?? config['/Runner'].vm.maximumRam;
const cdImages = (config: RunnerConfig) =>
  config['/Runner'].vm.drives.filter((drive) => drive.type === 'ide-cd').map((drive) => drive.file ?? '');
const diskSizes = (config: RunnerConfig) =>
  config['/Runner'].vm.drives.filter((drive) => drive.type === 'raw').map((drive) => drive.size);

/**
 * What changed between the applied config and the next one, limited to what the running qemu
 * (started with `started`) can take: CPUs up to its maximum, RAM up to its size, CD drives it has.
 */
export function liveChanges(started: RunnerConfig, applied: RunnerConfig, next: RunnerConfig): LiveChanges {
  const startedVm = started['/Runner'].vm;
  const changes: LiveChanges = { cdMedia: [], diskSizes: [] };
  const cpus = Math.min(next['/Runner'].vm.currentCpus, startedVm.maximumCpus);
  if (cpus !== Math.min(applied['/Runner'].vm.currentCpus, startedVm.maximumCpus)) changes.currentCpus = cpus;
  const ram = Math.min(effectiveRam(next), startedVm.maximumRam);
  if (ram !== Math.min(effectiveRam(applied), startedVm.maximumRam)) changes.currentRam = ram;
  if (next['/Runner'].vm.powerdownTimeout !== applied['/Runner'].vm.powerdownTimeout) {
    changes.powerdownTimeout = next['/Runner'].vm.powerdownTimeout;
  }
  const user = next['/Runner'].vm.display.loggedInUser;
  if (user !== applied['/Runner'].vm.display.loggedInUser) changes.loggedInUser = user;
  const driveCount = cdImages(started).length;
  const before = cdImages(applied);
  cdImages(next).forEach((image, index) => {
    if (index < driveCount && image !== before[index]) changes.cdMedia.push({ id: cdDriveId(index), image });
  });
  const [diskCount, sizesBefore] = [diskSizes(started).length, diskSizes(applied)];
  diskSizes(next).forEach((bytes, index) => {
    if (index < diskCount && bytes !== undefined && bytes !== sizesBefore[index])
      changes.diskSizes.push({ id: diskId(index), bytes });
  });
  return changes;
}

/** Blanks the fields that can change at runtime (or do not concern qemu) so they do not count as restart changes. */
function withoutLiveFields(config: RunnerConfig): unknown {
  const settings = config['/Runner'];
  const vm = settings.vm;
  return {
    '/Runner': {
      ...settings,
      whenGuestPowersOff: undefined,
      guestShutdownStops: undefined,
      whenQemuFails: undefined,
      whenStartFails: undefined,
      resetRequest: undefined,
      vm: {
        ...vm,
        currentCpus: undefined,
        currentRam: undefined,
        powerdownTimeout: undefined,
        hotplugDisks: undefined,
        snapshotCopy: undefined,
        display: { ...vm.display, loggedInUser: undefined },
        drives: vm.drives.map((drive) =>
          drive.type === 'ide-cd' ? { ...drive, file: undefined } : { ...drive, size: undefined },
        ),
      },
    },
  };
}

function differingPaths(a: unknown, b: unknown, at: PropertyKey[]): PropertyKey[][] {
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) return [at];
    return a.flatMap((item, index) => differingPaths(item, b[index], [...at, index]));
  }
  const isObject = (value: unknown): value is Record<string, unknown> =>
    typeof value === 'object' && value !== null && !Array.isArray(value);
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
    return keys.flatMap((key) => differingPaths(a[key], b[key], [...at, key]));
  }
  return Object.is(a, b) ? [] : [at];
}

export interface RestartChange {
  /** The field's path below "/Runner", e.g. `vm.maximumRam`. */
  field: string;
  current?: unknown;
  desired?: unknown;
}

function valueAt(value: unknown, path: PropertyKey[]): unknown {
  return path.reduce<unknown>(
    (node, key) =>
      node && typeof node === 'object' ? (node as Record<PropertyKey, unknown>)[key] : undefined,
    value,
  );
}

/** What changed from the config qemu was started with that only takes effect after a restart. */
export function restartChanges(started: RunnerConfig, next: RunnerConfig): RestartChange[] {
  return differingPaths(withoutLiveFields(started), withoutLiveFields(next), []).map((path) => ({
    field: formatFieldPath(path.slice(1)),
    current: valueAt(started, path),
    desired: valueAt(next, path),
  }));
}
