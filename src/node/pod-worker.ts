// Runs one pod bound to this node, as kubelet's pod worker does: sets up its volumes, starts its
// container (a `vmop` subcommand from this checkout) in its own mount namespace, restarts it as the
// restart policy says with backoff, reports the pod's status, and on deletion stops the process
// (SIGTERM, the grace period, SIGKILL) and completes the deletion.
import os from 'node:os';
import { mkdir, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import {
  PatchStrategy,
  setHeaderOptions,
  type CoreV1Api,
  type V1Container,
  type V1ContainerStateTerminated,
  type V1Pod,
} from '@kubernetes/client-node';
import { isNotFound, readOptional } from '../kube/clients.js';
import { backoffDelay, type Backoff } from '../queue/backoff.js';
import type { Logger } from '../util/logger.js';
import {
  podStatus,
  restartPolicy,
  terminationOf,
  willRestart,
  type ContainerRecord,
  type Termination,
} from './pod-status.js';
import { envReferences, resolveEnv, type EnvResult } from './runtime/env.js';
import { launch, type ExitStatus, type LaunchedProcess } from './runtime/launcher.js';
import type { ClaimResolver } from './volumes/claims.js';
import { PodVolumes, type ContainerVolumes } from './volumes/pod-volumes.js';
import type { SourceWatches } from './volumes/source-watches.js';

/** The `vmop` command of this checkout; a container's args[0] is the subcommand. */
export const VMOP_BIN = fileURLToPath(new URL('../../bin/vmop', import.meta.url));
export const RUNNER_LOG = 'runner.log';
/**
 * The pod's runtime directory as its process sees it: the pod's `run` directory bound onto one
 * short, fixed path, so that socket paths below it stay within the 108 bytes a unix socket allows.
 */
export const POD_RUNTIME_DIR = '/run/vmop-pod';

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
/** How often a pod that waits for its volumes (or its env's sources) is looked at again. */
const SETUP_RETRY: Backoff = { baseMs: 500, capMs: 5_000 };
const DEFAULT_GRACE_SECONDS = 30;

export interface PodWorkerDeps {
  nodeName: string;
  hostIP: string;
  /** Pod directories go here: `<podsDir>/<namespace>_<name>_<uid>`. */
  podsDir: string;
  core: CoreV1Api;
  sources: SourceWatches;
  resolveClaim: ClaimResolver;
  /** Environment defaults for the container; its own env wins where it resolves. */
  runnerEnv: Record<string, string>;
  restartBackoff: Backoff;
  logger: Logger;
}

interface Running {
  launched: LaunchedProcess;
  /** Resolves once the exit has been recorded. */
  done: Promise<void>;
}

const signalNumber = (signal: NodeJS.Signals | null) => (signal ? os.constants.signals[signal] : undefined);

function fromApi(terminated: V1ContainerStateTerminated): Termination {
  return {
    ...terminated,
    reason: terminated.reason ?? 'Unknown',
    finishedAt: terminated.finishedAt ?? new Date(),
  };
}

/** What the pod's status says about its container when this agent takes the pod over. */
function adoptedRecord(pod: V1Pod, container: V1Container): ContainerRecord {
  const fresh: ContainerRecord = {
    name: container.name,
    image: container.image ?? '',
    state: { kind: 'waiting', reason: 'ContainerCreating' },
    restartCount: 0,
  };
  const status = pod.status?.containerStatuses?.find((s) => s.name === container.name);
  if (!status) return fresh;
  const { running, terminated } = status.state ?? {};
  const restartCount = status.restartCount;
  if (terminated && (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed')) {
    return { ...fresh, restartCount, state: { kind: 'terminated', termination: fromApi(terminated) } };
  }
  // A container that ran under an earlier agent is gone: its next start is a restart.
  const lastExit = running
    ? fromApi({
        exitCode: 137,
        reason: 'ContainerStatusUnknown',
        message: 'the runner was not running when vmop node started',
        startedAt: running.startedAt,
      })
    : (terminated ?? status.lastState?.terminated) && fromApi((terminated ?? status.lastState?.terminated)!);
  return lastExit ? { ...fresh, restartCount, lastTermination: lastExit } : fresh;
}

export class PodWorker {
  private pod: V1Pod;
  private readonly container: V1Container;
  private readonly logger: Logger;
  private readonly dir: string;
  private readonly logPath: string;
  private readonly devStagingDir: string;
  private readonly startTime: Date;
  private readonly volumes: PodVolumes;
  private record: ContainerRecord;
  private running?: Running;
  private timer?: NodeJS.Timeout;
  private restartFailures = 0;
  private setupAttempts = 0;
  /** The pod is being deleted, or the agent stops: no more starts. */
  private stopping = false;
  private done = false;
  private lastReported?: unknown;
  private syncing: Promise<void> = Promise.resolve();
  private resolveFinished!: () => void;
  /** Resolves when the worker is done with the pod (deleted, or the agent stopped). */
  readonly finished = new Promise<void>((resolve) => (this.resolveFinished = resolve));

  constructor(
    pod: V1Pod,
    private readonly deps: PodWorkerDeps,
  ) {
    this.pod = pod;
    const { namespace, name, uid } = pod.metadata!;
    this.container = pod.spec!.containers[0]!;
    this.logger = deps.logger.child({ pod: `${namespace}/${name}` });
    if (pod.spec!.containers.length > 1 || pod.spec!.initContainers?.length) {
      this.logger.warn('only the first container of a pod runs on vmop node');
    }
    this.dir = path.join(deps.podsDir, `${namespace}_${name}_${uid}`);
    this.logPath = path.join(this.dir, RUNNER_LOG);
    this.devStagingDir = path.join(this.dir, 'dev');
    this.startTime = pod.status?.startTime ?? new Date();
    this.volumes = new PodVolumes(pod, path.join(this.dir, 'volumes'), {
      sources: deps.sources,
      resolveClaim: deps.resolveClaim,
      logger: this.logger,
    });
    this.record = adoptedRecord(pod, this.container);
  }

  /** A newer version of the pod from the watch. */
  update(pod: V1Pod): void {
    this.pod = pod;
    this.schedule();
  }

  /** The pod is gone from the API (force-deleted): stop what runs, nothing left to report. */
  gone(): void {
    this.syncing = this.syncing
      .then(() => this.terminate(this.gracePeriodSeconds(), false))
      .catch((err: unknown) => this.logger.warn({ err: String(err) }, 'cleaning up after the pod failed'));
  }

  /** The agent stops: stop the process within `graceMs` at most, leave the pod bound for the next start. */
  async shutdown(graceMs: number): Promise<void> {
    this.stopping = true;
    clearTimeout(this.timer);
    await this.syncing;
    const running = this.running;
    if (running) {
      await running.launched.stop(Math.min(graceMs, this.gracePeriodSeconds() * 1000));
      await running.done;
      const last = this.record.state.kind === 'terminated' ? this.record.state.termination : undefined;
      this.record = {
        ...this.record,
        state: {
          kind: 'waiting',
          reason: 'NodeAgentStopped',
          message: 'vmop node stopped; it restarts the container when it runs again',
        },
        lastTermination: last ?? this.record.lastTermination,
      };
      await this.report().catch((err: unknown) =>
        this.logger.warn({ err: String(err) }, 'could not report the stopped container'),
      );
    }
    await this.volumes.close();
    this.finish();
  }

  private finish() {
    this.done = true;
    this.resolveFinished();
  }

  private schedule() {
    this.syncing = this.syncing
      .then(() => this.sync())
      .catch((err: unknown) => {
        this.logger.warn({ err: String(err) }, 'pod sync failed; trying again');
        this.retryIn(backoffDelay(++this.setupAttempts, SETUP_RETRY));
      });
  }

  private retryIn(ms: number) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.schedule();
    }, ms);
  }

  private gracePeriodSeconds(): number {
    const { metadata, spec } = this.pod;
    return (
      metadata?.deletionGracePeriodSeconds ?? spec?.terminationGracePeriodSeconds ?? DEFAULT_GRACE_SECONDS
    );
  }

  private async sync(): Promise<void> {
    if (this.done) return;
    // Again after a failed attempt: stopping what is stopped is a no-op, the deletion is retried.
    if (this.pod.metadata?.deletionTimestamp) return this.terminate(this.gracePeriodSeconds(), true);
    if (this.stopping) return;
    // Running, backing off, or terminated for good: only the status may need writing.
    if (this.running || this.timer || this.record.state.kind === 'terminated') return this.report();

    const setup = await this.volumes.setUp(this.container);
    if ('waiting' in setup) return this.waitForSetup(setup.reason, setup.waiting);
    const env = await this.environment();
    if ('error' in env) return this.waitForSetup('CreateContainerConfigError', env.error);
    this.setupAttempts = 0;
    await this.start(setup.ready, env.env);
  }

  private async waitForSetup(reason: string, message: string): Promise<void> {
    this.record = { ...this.record, state: { kind: 'waiting', reason, message } };
    await this.report();
    this.retryIn(backoffDelay(++this.setupAttempts, SETUP_RETRY));
  }

  private async environment(): Promise<EnvResult> {
    const namespace = this.pod.metadata!.namespace!;
    const refs = envReferences(this.container);
    const configMaps = new Map(
      await Promise.all(
        refs.configMaps.map(async (name) => {
          const found = await readOptional(() => this.deps.core.readNamespacedConfigMap({ name, namespace }));
          return [name, found && { ...found.data }] as const;
        }),
      ),
    );
    const secrets = new Map(
      await Promise.all(
        refs.secrets.map(async (name) => {
          const found = await readOptional(() => this.deps.core.readNamespacedSecret({ name, namespace }));
          const data =
            found &&
            Object.entries(found.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]);
          return [name, data && Object.fromEntries(data)] as const;
        }),
      ),
    );
    return resolveEnv(
      this.pod,
      this.container,
      { configMaps, secrets },
      this.deps.runnerEnv,
      this.deps.hostIP,
    );
  }

  private async start(volumes: ContainerVolumes, env: Record<string, string>): Promise<void> {
    const runtimeDir = path.join(this.dir, 'run');
    for (const dir of [this.devStagingDir, runtimeDir]) await mkdir(dir, { recursive: true, mode: 0o700 });
    const mounts = [...volumes.mounts, { source: runtimeDir, target: POD_RUNTIME_DIR }];
    const restart = this.record.lastTermination !== undefined;
    const launched = await launch({
      argv: [VMOP_BIN, ...(this.container.args ?? [])],
      // The runner's runtime dir defaults to $XDG_RUNTIME_DIR/vmrunner/<vm>: one per pod.
      env: {
        PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
        HOME: '/root',
        HOSTNAME: os.hostname(),
        XDG_RUNTIME_DIR: POD_RUNTIME_DIR,
        ...env,
      },
      cwd: this.container.workingDir ?? '/',
      logPath: this.logPath,
      devStagingDir: this.devStagingDir,
      mounts,
      devices: volumes.devices,
    });
    const startedAt = new Date();
    const containerID = `vmop://${launched.pid}`;
    this.record = {
      ...this.record,
      restartCount: this.record.restartCount + (restart ? 1 : 0),
      state: { kind: 'running', startedAt, containerID },
    };
    this.logger.info(
      { runnerPid: launched.pid, restartCount: this.record.restartCount, log: this.logPath },
      'runner started',
    );
    const done = launched.exited.then((exit) => this.exited(exit, launched.pid, startedAt, containerID));
    this.running = { launched, done };
    await this.report();
  }

  private exited(exit: ExitStatus, runnerPid: number, startedAt: Date, containerID: string) {
    this.running = undefined;
    const finishedAt = new Date();
    const termination = terminationOf(
      { code: exit.code, signalNumber: signalNumber(exit.signal) },
      { startedAt, finishedAt },
      containerID,
    );
    this.logger.info({ runnerPid, exitCode: termination.exitCode, signal: exit.signal }, 'runner exited');
    if (this.stopping) {
      this.record = { ...this.record, state: { kind: 'terminated', termination } };
      return;
    }
    const backoff = this.deps.restartBackoff;
    // As kubelet: a container that ran long enough without trouble starts its backoff afresh.
    if (finishedAt.getTime() - startedAt.getTime() >= 2 * backoff.capMs) this.restartFailures = 0;
    if (willRestart(restartPolicy(this.pod), termination.exitCode)) {
      const delay = backoffDelay(++this.restartFailures, backoff);
      this.record = {
        ...this.record,
        state: {
          kind: 'waiting',
          reason: 'CrashLoopBackOff',
          message: `back-off ${Math.round(delay / 1000)}s restarting the container`,
        },
        lastTermination: termination,
      };
      this.logger.info({ inMs: delay }, 'restarting the runner after a back-off');
      this.retryIn(delay);
    } else {
      this.record = { ...this.record, state: { kind: 'terminated', termination } };
    }
    this.schedule();
  }

  private async terminate(graceSeconds: number, completeDeletion: boolean): Promise<void> {
    if (this.done) return;
    this.stopping = true;
    clearTimeout(this.timer);
    const running = this.running;
    if (running) {
      this.logger.info({ graceSeconds }, 'stopping the runner');
      await running.launched.stop(graceSeconds * 1000);
      await running.done;
    }
    const { name, namespace, uid } = this.pod.metadata!;
    if (completeDeletion) {
      await this.report().catch((err: unknown) =>
        this.logger.warn({ err: String(err) }, 'could not report the final status'),
      );
      await this.deps.core
        .deleteNamespacedPod({
          name: name!,
          namespace: namespace!,
          body: { gracePeriodSeconds: 0, preconditions: { uid } },
        })
        .catch((err: unknown) => {
          if (!isNotFound(err) && (err as { code?: number }).code !== 409) throw err;
        });
      this.logger.info('pod deleted');
    }
    await this.volumes.close();
    await this.removeDirKeepingLog();
    this.finish();
  }

  /** The pod directory goes with the pod, except the runner's log, kept for whoever wonders why it stopped. */
  private async removeDirKeepingLog() {
    const entries = await readdir(this.dir).catch(() => []);
    await Promise.all(
      entries
        .filter((e) => e !== RUNNER_LOG)
        .map((e) => rm(path.join(this.dir, e), { recursive: true, force: true })),
    );
  }

  /** Writes the status when it differs from the last one written. */
  private async report(): Promise<void> {
    const status = podStatus({
      pod: this.pod,
      container: this.record,
      hostIP: this.deps.hostIP,
      startTime: this.startTime,
      message: `vmop node ${this.deps.nodeName}: runner output in ${this.logPath}`,
      now: new Date(),
    });
    const body = JSON.parse(JSON.stringify({ metadata: { uid: this.pod.metadata!.uid }, status }));
    if (isDeepStrictEqual(body, this.lastReported)) return;
    const { name, namespace } = this.pod.metadata!;
    try {
      await this.deps.core.patchNamespacedPodStatus({ name: name!, namespace: namespace!, body }, mergePatch);
      this.lastReported = body;
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}
