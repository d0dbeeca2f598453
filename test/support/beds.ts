// The e2e test beds (issue 37). A whole local Kubernetes costs a minute or two to start and stop,
// so the e2e suites share beds by kind: each bed is one test file (test/e2e/*-bed.test.ts) that
// starts its bed, runs its suites one after the other, each in namespaces of its own (made fresh
// before its tests, deleted and waited for after them), then stops the bed and checks that it left
// nothing behind on the machine. Beds run side by side (test/support/bed-sequencer.ts), each on
// its own network.
//
//   cluster  a bare two-node Kubernetes with every image on both nodes (no vmop): the Helm chart,
//            an upgrade, and the cluster itself. Stopped by killing its owner (its process group's
//            reaper's path).
//   dev-2    `vmop dev up --nodes 2 --redis sentinel`: migration, drains, node and Redis loss; disk imports.
//   dev      `vmop dev up`: everything on one node; the fault suite last. Stopped by `vmop dev down`.
//
// A bed is a process of its own (`vmop dev`'s supervisor, or the cluster owner): should its test
// file's process die, a watchdog (or the owner itself) stops it. Neither watches a pid: each reads
// a pipe that only the test file's process holds, which ends when that process is gone.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { copyFile, mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { VMOP_BIN, readDevState, type DevState } from '../../src/devenv/dev-environment.js';
import { signalProcess } from '../../src/util/process.js';
import { ClusterBedState } from './cluster-owner.js';
import { clusterVms, type ClusterVms } from './cluster-vms.js';
import { failureReport } from './failure-report.js';
import { qemuSignalGuard, type QemuSignalGuard } from './qemu-signal-guard.js';
import { RESTRICTED_NAMESPACE_LABELS } from '../../src/reconcilers/virtual-machine/pod-security.js';
import {
  leftBehind,
  machineTraces,
  NOTHING_LEFT,
  type Footprint,
  type MachineTraces,
} from './machine-traces.js';

const run = promisify(execFile);

export type BedKind = 'cluster' | 'dev-2' | 'dev';
// --no-kvm: nested KVM on these machines does not boot a Linux guest (FACTS), and a VM of the
// standard template (the GUI's New VM form makes one) must boot; the test guest's template
// emulates anyway. The chart's suites keep KVM where /dev/kvm exists.
const DEV_BED_ARGS = {
  'dev-2': ['--nodes', '2', '--redis', 'sentinel', '--vm-cidr', '10.66.10.0/24', '--no-kvm'],
  dev: ['--no-kvm'],
} as const;

/** This file's bed: one a test file (and its process). */
let current: { kind: BedKind; dir: string } | undefined;

const bed = () => {
  if (!current) throw new Error('no test bed: suites run from a bed file (test/e2e/*-bed.test.ts)');
  return current;
};
const clusterStateFile = (dir: string) => path.join(dir, 'state.json');

function readClusterState(dir: string): ClusterBedState | undefined {
  try {
    return ClusterBedState.parse(JSON.parse(readFileSync(clusterStateFile(dir), 'utf8')));
  } catch {
    return undefined; // not written yet (or being replaced)
  }
}

// The managers inherit this environment: they log at their own level (suites read their logs).
const vmopEnv = (dir: string) => ({ ...process.env, VMOP_DEV_DIR: dir });

/**
 * Starts a detached shell command whose stdin is a pipe only this process holds (Node's pipes are
 * close-on-exec): it reads end-of-file once this process is gone, however it ended.
 */
function spawnTiedToThisProcess(script: string, args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  const child = spawn('sh', ['-c', script, ...args], {
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
    env,
  });
  child.unref();
  (child.stdin as unknown as { unref(): void }).unref();
  return child;
}

async function start(kind: BedKind, dir: string): Promise<void> {
  const startedAt = Date.now();
  if (kind === 'cluster') {
    const log = path.join(dir, 'owner.log');
    const owner = spawnTiedToThisProcess(
      'exec "$0" --import tsx test/support/cluster-owner.ts "$1" 2 >>"$2" 2>&1',
      [process.execPath, clusterStateFile(dir), log],
      process.env,
    );
    while (!readClusterState(dir)) {
      if (owner.exitCode !== null || owner.signalCode !== null)
        throw new Error(`the cluster bed did not start:\n${readFileSync(log, 'utf8').slice(-3000)}`);
      await sleep(500);
    }
  } else {
    await run(VMOP_BIN, ['dev', 'up', '-o', 'json', ...DEV_BED_ARGS[kind]], { env: vmopEnv(dir) });
    // Should this process die before it stops the bed, the watchdog does. (Its arguments name
    // nothing of the bed's: it is not one of the bed's processes.)
    spawnTiedToThisProcess('cat >/dev/null; [ -d "$BED" ] && VMOP_DEV_DIR="$BED" "$VMOP" dev down', [], {
      ...process.env,
      BED: dir,
      VMOP: VMOP_BIN,
    });
  }
  console.log(`test bed ${kind} up after ${Math.round((Date.now() - startedAt) / 1000)} s`);
}

/** What the bed made on this machine, from where it says things are. */
function footprint(kind: BedKind, dir: string): Footprint | undefined {
  if (kind === 'cluster') {
    const state = readClusterState(dir);
    return (
      state && {
        dirs: [dir, state.dir],
        ...state.network,
        cgroupRoots: state.nodes.map((node) => node.cgroupRoot),
        processGroups: [state.processGroup],
      }
    );
  }
  const state = readDevState(dir);
  return (
    state && {
      dirs: [dir, state.cluster.dir],
      ...state.cluster.network,
      cgroupRoots: state.nodeServices.map((node) => node.cgroupRoot),
      processGroups: state.processGroups,
    }
  );
}

/** Stops the bed and checks, as it stopped, that it left nothing behind. */
async function stopAndCheck(kind: BedKind, dir: string, before: MachineTraces): Promise<void> {
  const made = footprint(kind, dir);
  expect(made, `the ${kind} bed was not running any more at its end`).toBeDefined();
  const during = await machineTraces(made!);
  // What is looked for was there while it ran: the check after it is not vacuous.
  expect(during.processes.length, `the ${kind} bed's processes`).toBeGreaterThan(0);
  expect(during.netns, `the ${kind} bed's network namespaces`).toEqual(made!.namespaces);
  if (kind === 'cluster') {
    // As a crash of its owner would: the process group's reaper must leave nothing behind.
    expect(signalProcess(readClusterState(dir)!.owner, 'SIGKILL'), 'the cluster bed owner runs').toBe(true);
  } else {
    await run(VMOP_BIN, ['dev', 'down'], { env: vmopEnv(dir) });
  }
  // The reaper takes a moment after its owner died (TERM, then KILL after 5 s, then the clean-up).
  const nothing = JSON.stringify(NOTHING_LEFT);
  let left = leftBehind(before, await machineTraces(made!));
  for (let waited = 0; waited < 60_000 && JSON.stringify(left) !== nothing; waited += 1_000) {
    await sleep(1_000);
    left = leftBehind(before, await machineTraces(made!));
  }
  expect(left, `the ${kind} bed (${made!.dirs.join(', ')}) left this behind`).toEqual(NOTHING_LEFT);
}

/**
 * Makes this test file a bed of `kind`: started before its suites, stopped after them with the
 * check that nothing is left. Call it once, at the top of a bed file.
 */
export function runOnBed(kind: BedKind): void {
  let before: MachineTraces | undefined;
  beforeAll(async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), `vmop-bed-${kind}-`));
    current = { kind, dir };
    before = await machineTraces({
      dirs: [dir],
      namespaces: [],
      hostInterface: '-',
      cgroupRoots: [],
      processGroups: [],
    });
    await start(kind, dir);
  }, 1_800_000);
  afterAll(async () => {
    if (!current) return;
    try {
      if (before) await stopAndCheck(kind, current.dir, before);
    } finally {
      await rm(current.dir, { recursive: true, force: true });
      current = undefined;
    }
  }, 900_000);
}

export interface SuiteOptions {
  /** The namespaces the suite uses: made fresh before its tests, deleted after them. */
  namespaces: string[];
  /** Namespaces the suite's tests make themselves: deleted after them too. */
  madeByTests?: string[];
}

/** A copy of the bed's kubeconfig whose context has `namespace` (as `kubectl config set-context --namespace`). */
const kubeconfigIn = (namespace: string) => path.join(bed().dir, `kubeconfig.${namespace}`);

/** `kubectl label` arguments for RESTRICTED_NAMESPACE_LABELS. */
export const RESTRICTED_LABEL = Object.entries(RESTRICTED_NAMESPACE_LABELS).map(([k, v]) => `${k}=${v}`)[0]!;

async function makeNamespaces(kubeconfig: string, namespaces: string[]): Promise<void> {
  for (const namespace of namespaces) {
    await run('kubectl', ['--kubeconfig', kubeconfig, 'create', 'namespace', namespace]);
    // Every pod vmop makes for a VM must be admitted as a tenant's pod is (pod-security.ts).
    await run('kubectl', ['--kubeconfig', kubeconfig, 'label', 'namespace', namespace, RESTRICTED_LABEL]);
    await copyFile(kubeconfig, kubeconfigIn(namespace));
    await run('kubectl', [
      ...['--kubeconfig', kubeconfigIn(namespace), 'config', 'set-context', '--current'],
      `--namespace=${namespace}`,
    ]);
  }
}

async function deleteNamespaces(kubeconfig: string, namespaces: string[]): Promise<void> {
  if (namespaces.length === 0) return;
  await run('kubectl', [
    ...['--kubeconfig', kubeconfig, 'delete', 'namespace', ...namespaces],
    ...['--ignore-not-found', '--wait', '--timeout=300s'],
  ]);
}

/** The log files in `dir` and its folders (the control plane's, each node's; not the nodes' trees). */
async function logFilesIn(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const files = entries
    .filter((e) => e.isFile() && e.name.endsWith('.log'))
    .map((e) => path.join(dir, e.name));
  for (const sub of entries.filter((e) => e.isDirectory())) {
    const inSub = await readdir(path.join(dir, sub.name), { withFileTypes: true }).catch(() => []);
    for (const e of inSub)
      if (e.isFile() && e.name.endsWith('.log')) files.push(path.join(dir, sub.name, e.name));
  }
  return files;
}

/** The guard of this file's bed, shared by its suites (each test is checked once). */
let signalGuard: QemuSignalGuard | undefined;

/** Fails with what the guard found: QEMUs stopped by a signal no test announced. */
async function checkQemuSignals(): Promise<void> {
  const unexpected = (await signalGuard?.unexpected()) ?? [];
  if (unexpected.length > 0) throw new Error(unexpected.join('\n'));
}

/**
 * Registers the suite's hooks: its namespaces before its tests, and gone after them; when a test
 * fails, what they held then, in the log; and after each test, the guard against QEMUs stopped by
 * a signal the test did not send. Returns the guard.
 */
function useNamespaces(
  kind: BedKind,
  options: SuiteOptions,
  kubeconfig: () => string,
  logs: () => Promise<string[]> = async () => [],
  queue?: () => Promise<string>,
): QemuSignalGuard {
  const guard = (signalGuard ??= qemuSignalGuard(kubeconfig));
  beforeAll(async () => {
    if (bed().kind !== kind) throw new Error(`this suite runs on the ${kind} bed, not ${bed().kind}`);
    await makeNamespaces(kubeconfig(), options.namespaces);
  }, 300_000);
  afterEach(async ({ task }) => {
    if (task.result?.state !== 'fail' || !current) return;
    const namespaces = [...options.namespaces, ...(options.madeByTests ?? [])];
    const report = await failureReport({ kubeconfig: kubeconfig(), namespaces, logs: await logs(), queue });
    console.log(`=== ${task.name} failed; the bed then:
${report}`);
  }, 120_000);
  // Registered last, so it runs first (after-hooks run in reverse): a test it fails gets the report.
  afterEach(async () => {
    if (current) await checkQemuSignals();
  }, 60_000);
  afterAll(async () => {
    if (!current) return;
    try {
      await checkQemuSignals(); // a stop whose Event came after its test's check
    } finally {
      await deleteNamespaces(kubeconfig(), [...options.namespaces, ...(options.madeByTests ?? [])]);
    }
  }, 600_000);
  return guard;
}

export interface DevBed {
  /** VMOP_DEV_DIR of the bed's `vmop dev`. */
  readonly dir: string;
  readonly kubeconfig: string;
  /** Where things are now (pids change when `vmop dev` restarts a process). */
  state(): DevState;
  /** Runs `vmop …` against the bed; its stdout. */
  vmop(...args: string[]): Promise<string>;
  /**
   * The environment `vmop` and kubectl run in against this bed: bin/ on the PATH (the kubectl
   * plugin), and KUBECONFIG with `namespace` (one of the suite's) as the current one, if given.
   */
  env(namespace?: string): NodeJS.ProcessEnv;
  vms(namespace: string): ClusterVms;
  /** What the guard found since its last look (and so will not fail the test with). */
  qemuSignalsNobodySent(): Promise<string[]>;
}

/** The `vmop dev` bed of this file, for a suite (call it inside the suite's describe). */
export function useDevBed(kind: 'dev' | 'dev-2', options: SuiteOptions): DevBed {
  const state = () => {
    const found = readDevState(bed().dir);
    if (!found) throw new Error(`the ${kind} bed is not running`);
    return found;
  };
  const handle: DevBed = {
    get dir() {
      return bed().dir;
    },
    get kubeconfig() {
      return state().kubeconfig;
    },
    state,
    env: (namespace) => ({
      ...process.env,
      VMOP_DEV_DIR: bed().dir,
      KUBECONFIG: namespace ? kubeconfigIn(namespace) : state().kubeconfig,
      PATH: `${path.resolve('bin')}:${process.env.PATH}`,
    }),
    vmop: async (...args) => (await run(VMOP_BIN, args, { env: handle.env() })).stdout,
    vms: (namespace) => clusterVms(state().kubeconfig, namespace),
    qemuSignalsNobodySent: () => guard.unexpected(),
  };
  const guard = useNamespaces(
    kind,
    options,
    () => state().kubeconfig,
    async () => [
      ...state().managers.map((manager) => manager.log),
      path.join(bed().dir, 'supervisor.log'),
      ...(await logFilesIn(state().cluster.dir)),
    ],
    async () =>
      (await run(VMOP_BIN, ['queue', 'ls'], { env: { ...process.env, REDIS_URL: state().redisUrl } })).stdout,
  );
  return handle;
}

export interface ClusterBed {
  state(): ClusterBedState;
  readonly kubeconfig: string;
  vms(namespace: string): ClusterVms;
  /** What the guard found since its last look (and so will not fail the test with). */
  qemuSignalsNobodySent(): Promise<string[]>;
}

/** The bare cluster bed of this file, for a suite (call it inside the suite's describe). */
export function useClusterBed(options: SuiteOptions): ClusterBed {
  const state = () => {
    const found = readClusterState(bed().dir);
    if (!found) throw new Error('the cluster bed is not running');
    return found;
  };
  const guard = useNamespaces('cluster', options, () => state().kubeconfigPath);
  return {
    state,
    get kubeconfig() {
      return state().kubeconfigPath;
    },
    vms: (namespace) => clusterVms(state().kubeconfigPath, namespace),
    qemuSignalsNobodySent: () => guard.unexpected(),
  };
}
