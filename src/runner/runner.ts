import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  configDigest,
  parseRunnerConfig,
  type RunnerConfig,
  type RunnerSettings,
} from '../api/runner-config.js';
import type { RunnerConfigError } from '../api/runner-snapshot.js';
import type { Logger } from '../util/logger.js';
import { describeExit } from '../util/process.js';
import { spawnChild, type Child, type ChildExit } from './child.js';
import { buildNoCloudImage } from './cloud-init.js';
import { displaySecretFiles } from './controllers/display.js';
import { ConfigError } from './config-error.js';
import { cdDrives } from './drives.js';
import { renderProcesses, type ProcessLaunch } from './processes.js';
import { watchFiles, type FileWatch } from './file-watch.js';
import { runnerPaths, type RunnerPaths } from './paths.js';
import { QmpClient, type QmpEvent } from './qmp/client.js';
import { balloon, cont, queryBalloon, queryCpuCount, quit, systemPowerdown } from './qmp/commands.js';
import type { VmEvent } from './qmp/events.js';
import { foldEvent, type SnapshotState } from './snapshot/fold.js';
import { SnapshotStore, type PublishSnapshot } from './snapshot/store.js';
import { RuntimeControls } from './runtime-controls.js';
import { startSwtpm } from './swtpm.js';
import { ROUTED_GATEWAY, ROUTED_TAP } from '../api/vm-network.js';
import {
  podNameservers,
  routedLease,
  startDhcpServer,
  waitForTap,
  type DhcpServer,
} from './network/routed-nic.js';
import { adoptArrivedTpmState } from './migration/tpm-state.js';
import { buildSysprepImage } from './sysprep.js';
import { AGENT_PORT_ID } from './template/context.js';
import { keepSerialLogSmall, runMarker, serialLogWriter, startRunInSerialLog } from './serial-log.js';
import { startSerialConsoleHub, type SerialConsoleHub } from '../console/serial-hub.js';
import { OutgoingMigrations } from './migration/outgoing.js';
import { contactSource, incomingProcesses, type Incoming } from './migration/target.js';
import { arriveIn } from './migration/incoming.js';
import { startPortRelay, type PortRelay } from './network/port-relay.js';
import { readMigrationRequest, roleAtStart, type MigrationRequest } from './migration/request.js';
import type { RequestChannel } from './migration/request-channel.js';
import path from 'node:path';
import { readOptional } from './read-optional.js';
import { enableGuestMemoryStats, sampleVmUsage } from './metrics/sampler.js';
import type { VmUsage } from './metrics/usage.js';

export const EXIT_CLEAN = 0;
export const EXIT_FAILED = 1;
export const EXIT_BAD_CONFIG = 2;

export interface RunnerOptions {
  configPath: string;
  publish: PublishSnapshot;
  logger: Logger;
  pod?: string;
  podUid?: string;
  env?: NodeJS.ProcessEnv;
  /** Live migration: where the pod's annotations appear (downward API). */
  migration?: { podInfoFile: string };
  /** Live migration: this pod's address, which a target tells its source. */
  podIP?: string;
  /** Live migration: the requests the manager sends at once (request-channel.ts). */
  watchRequests?: (onRequest: (request: MigrationRequest) => void) => RequestChannel;
  /** Where the VM's key file appears (live migration, attached disks); beside the config when absent. */
  keysDir?: string;
}

/** How long qemu gets to exit after `quit` before it is killed. */
const QUIT_GRACE_MS = 10_000;
/** How long a runner waits for the node agent to make its tap before it gives up (and kubelet restarts it). */
const TAP_WAIT_MS = 120_000;
/** How long swtpm gets to follow qemu (it terminates when qemu goes away) before it is stopped. */
const SWTPM_GRACE_MS = 5_000;
const QMP_CONNECT_TIMEOUT_MS = 30_000;
/** How long a failed QMP connection waits for qemu to end, which tells why it failed. */
const QEMU_EXIT_GRACE_MS = 2_000;
/** How long a host-signal SHUTDOWN waits for qemu's line that says who sent the signal. */
const QEMU_SAYS_WAIT_MS = 1_000;
/** qemu's line for a signal that ends it: `terminating on signal 15 from pid 42 (kill)`. */
const QEMU_SIGNAL_LINE = /terminat\w* (on|by) signal/;
/** After asking the guest agent to shut down, how long before the ACPI power button is pressed too. */
const AGENT_SHUTDOWN_GRACE_MS = 10_000;
/** How often the power button is pressed again while the guest has not powered down. */
const POWER_BUTTON_REPEAT_MS = 10_000;

class StopRequested extends Error {
  constructor() {
    super('stop requested');
  }
}

function eventTime(event: VmEvent): string {
  const timestamp = (event as Partial<QmpEvent>).timestamp;
  const millis = timestamp ? timestamp.seconds * 1000 + timestamp.microseconds / 1000 : Date.now();
  return new Date(millis).toISOString();
}

/**
 * Supervises one VM: starts swtpm, builds the cloud-init image, starts qemu paused, configures it
 * over QMP and lets it run; applies config changes live; powers the guest down gracefully on
 * request; keeps a snapshot of the VM's state and hands every change to `publish`.
 */
export class VmRunner {
  private readonly logger: Logger;
  private readonly env: NodeJS.ProcessEnv;
  private store!: SnapshotStore;
  private started!: RunnerConfig;
  /** The config file's text at start: the watch reports any later difference. */
  private startedConfigText = '';
  private applied!: RunnerConfig;
  private paths!: RunnerPaths;
  private qemu?: Child;
  private swtpm?: Child;
  private qmp?: QmpClient;
  /** What changes the running VM; made once QEMU answers on QMP. */
  private controls?: RuntimeControls;
  private serialLog?: { close(): void | Promise<void> };
  private watch?: FileWatch;
  private requests?: RequestChannel;
  private startedWithDisplayPassword = false;
  private powerdownTimeoutSeconds = 0;
  private stopRequested = false;
  private stopping: Promise<void> = Promise.resolve();
  private killedAfterQuit = false;
  /** qemu was let run the guest: a failure from now on is not a start failure. */
  private guestRan = false;
  /** When the guest was let run in this pod (its uptime here). */
  private runningSince?: Date;
  /** The QEMU whose balloon was asked to report the guest's memory. */
  private guestStatsFor?: Child;
  /** Stopped before the guest ran: however qemu ended, nothing was lost. */
  private abandonedStart = false;
  /** QMP operations that change the VM run one after the other. */
  private serial: Promise<void> = Promise.resolve();
  /** Set while the runner waits to be stopped after the guest powered off for good. */
  private releaseLinger: (() => void) | undefined;
  /** What in the config keeps the VM from starting, when that is why it failed. */
  private configError?: RunnerConfigError;
  /** The live migrations this runner is the source of. */
  private outgoing?: OutgoingMigrations;
  /** The guest left for another pod: qemu's end is no shutdown, and the runner waits to be stopped. */
  private migratedAway = false;
  /** Answers the guest's DHCP on a routed network (the VM's own address). */
  private dhcp?: DhcpServer;
  private portRelay?: PortRelay;
  /** Holds qemu's serial console and lends it to one console session at a time. */
  private consoleHub?: SerialConsoleHub;
  /** Events folded after one that waits for qemu's words (a host signal), in order. */
  private heldEvents?: Promise<void>;

  constructor(private readonly options: RunnerOptions) {
    this.logger = options.logger;
    this.env = options.env ?? process.env;
  }

  /** Runs the VM until qemu has exited; resolves with the exit code for the runner process. */
  async run(): Promise<number> {
    const config = await this.loadConfig();
    if (!config) return EXIT_BAD_CONFIG;
    this.started = this.applied = config;
    const settings = config['/Runner'];
    this.powerdownTimeoutSeconds = settings.vm.powerdownTimeout;
    this.paths = runnerPaths(settings, {
      configPath: this.options.configPath,
      env: this.env,
      cwd: process.cwd(),
    });
    this.store = new SnapshotStore(this.initialState(settings), this.options.publish);
    this.store.update((state) => state, { event: 'RUNNER_STARTING' });

    const { left, incoming } = await roleAtStart(this.options.migration?.podInfoFile, this.paths.dataDir);
    if (left) {
      // Restarted after the guest left this pod: it runs elsewhere, so nothing starts here.
      this.migratedAway = true;
      this.store.update(
        (state) => ({
          ...state,
          phase: 'stopped',
          migration: { id: left, role: 'source', state: 'completed' },
        }),
        { event: 'RUNNER_MIGRATED_AWAY' },
      );
      return this.linger(EXIT_CLEAN, 'the guest migrated to another pod');
    }

    let failure: string | undefined;
    try {
      await this.start(settings, incoming);
    } catch (err) {
      if (this.stopRequested) {
        this.abandonedStart = true;
      } else {
        failure = (err as Error).message;
        if (err instanceof ConfigError) this.configError = { field: err.field, message: err.message };
        this.logger.error({ reason: failure }, 'starting the VM failed');
      }
      // The guest never ran: there is nothing to power down.
      await this.qemu?.stop(QUIT_GRACE_MS);
    }
    const exit = await this.qemu?.exited;
    await this.heldEvents;
    await this.stopping;
    await this.cleanUp();
    const code = this.finish(failure, exit);
    const waitFor = this.waitsForStop(code);
    const result = waitFor ? await this.linger(code, waitFor) : code;
    await this.consoleHub?.close();
    return result;
  }

  /** Waits to be stopped instead of exiting (kubelet would start the runner, and the VM, again). */
  private async linger(code: number, why: string): Promise<number> {
    this.logger.info(`${why}: waiting to be stopped`);
    const keepAlive = setInterval(() => undefined, 60_000); // a pending promise alone ends the process
    await new Promise<void>((resolve) => (this.releaseLinger = resolve));
    clearInterval(keepAlive);
    return code;
  }

  /** Why the runner stays (the VM is to stay off after how qemu ended), or undefined to exit. */
  private waitsForStop(code: number): string | undefined {
    if (this.stopRequested) return undefined;
    if (this.migratedAway) return 'the guest migrated to another pod';
    const settings = this.applied['/Runner'];
    if (code === EXIT_CLEAN && this.store.snapshot.lastShutdown?.guest) {
      const staysOff = settings.whenGuestPowersOff === 'waitForStop' || settings.guestShutdownStops;
      return staysOff ? 'the guest powered off and stays off' : undefined;
    }
    if (code === EXIT_FAILED && settings.whenQemuFails === 'waitForStop')
      return 'qemu failed and the VM stays off';
    if (code === EXIT_FAILED && !this.guestRan && settings.whenStartFails === 'waitForRetry')
      return 'the VM failed to start and the operator retries after its back-off';
    return undefined;
  }

  /** SIGTERM: powers the guest down (or abandons the start); qemu is stopped after powerdownTimeout. */
  requestStop(): void {
    if (this.releaseLinger) return this.releaseLinger();
    if (this.stopRequested) {
      this.logger.info('stop already in progress');
      return;
    }
    this.stopRequested = true;
    this.store?.update((state) => ({ ...state, stopRequested: true }), { event: 'RUNNER_STOP_REQUESTED' });
    this.stopping = this.shutDown().catch((err: unknown) => {
      this.logger.error({ err }, 'shutdown failed; killing qemu');
      this.qemu?.kill('SIGKILL');
    });
  }

  private async loadConfig(): Promise<RunnerConfig | undefined> {
    const { configPath } = this.options;
    let text: string;
    try {
      text = await readFile(configPath, 'utf8');
    } catch (err) {
      this.logger.error({ configPath }, `cannot read the config file: ${(err as Error).message}`);
      return undefined;
    }
    const parsed = parseRunnerConfig(text);
    if (!parsed.ok) {
      this.logger.error({ configPath, errors: parsed.errors }, `invalid config: ${parsed.errors.join('; ')}`);
      return undefined;
    }
    this.startedConfigText = text;
    return parsed.config;
  }

  private initialState(settings: RunnerSettings): SnapshotState {
    const drives = Object.fromEntries(
      cdDrives(settings.vm, '').map((cd) => [
        cd.id,
        { tray: 'closed' as const, ...(cd.image ? { medium: cd.image } : {}) },
      ]),
    );
    return {
      runId: randomUUID(),
      startedAt: new Date(performance.timeOrigin).toISOString(),
      config: configDigest(this.startedConfigText),
      pod: this.options.pod,
      podUid: this.options.podUid,
      ...(settings.resetRequest && {
        lastReset: { request: settings.resetRequest, at: new Date().toISOString() },
      }),
      phase: 'starting',
      cpus: 0,
      ram: 0,
      drives,
      booted: false,
    };
  }

  private checkStop() {
    if (this.stopRequested) throw new StopRequested();
  }

  private async start(settings: RunnerSettings, migration?: MigrationRequest): Promise<void> {
    const paths = this.paths;
    await mkdir(paths.runtimeDir, { recursive: true, mode: 0o700 });
    await mkdir(paths.dataDir, { recursive: true });
    this.consoleHub = await startSerialConsoleHub({
      socketPath: paths.consoleSessionsSocket,
      consoleLog: paths.consoleLog,
      logger: this.logger,
    });
    const secretFiles = displaySecretFiles(paths.displaySecretDir);
    const secret = {
      password: await readOptional(secretFiles.password),
      expiry: await readOptional(secretFiles.expiry),
    };
    this.startedWithDisplayPassword =
      settings.vm.display.spice !== undefined && secret.password !== undefined;

    // A migration's target renders its own QEMU (and swtpm) the same way, waiting for the state.
    const incoming = migration && (await contactSource(migration, this.keysDir(), this.logger));
    const rendered = await renderProcesses(settings, {
      paths,
      env: this.env,
      hasDisplayPassword: this.startedWithDisplayPassword,
      logger: this.logger,
    });
    const processes = incoming ? incomingProcesses(rendered, incoming.request, paths.dataDir) : rendered;
    if (!incoming && processes.swtpm) {
      const adopted = await adoptArrivedTpmState(paths.dataDir, paths.swtpmStateDir);
      if (adopted)
        this.logger.info({ migration: adopted }, 'the TPM state the guest arrived with is its own now');
    }
    await this.launch(settings, processes);
    if (incoming) await this.takeOver(secret, incoming);
    else await this.configure(settings, secret);
    this.outgoing = new OutgoingMigrations({
      logger: this.logger,
      store: this.store,
      qmp: () => this.qmp!,
      keysDir: this.keysDir(),
      dataDir: paths.dataDir,
      enqueue: (what, task) => this.enqueue(what, task),
      left: () => {
        this.migratedAway = true;
        // New connections to the relay fail at once rather than wait for a guest that is gone.
        void this.portRelay?.close();
      },
    });

    const podInfo = this.options.migration?.podInfoFile;
    const watched = new Map([
      [this.options.configPath, this.startedConfigText],
      [secretFiles.password, secret.password],
      [secretFiles.expiry, secret.expiry],
      ...(podInfo ? [[podInfo, await readOptional(podInfo)] as [string, string | undefined]] : []),
    ]);
    this.watch = watchFiles([...watched.keys()], watched, (file) => this.onFileChanged(file), {
      logger: this.logger,
    });
    this.requests = this.options.watchRequests?.((request) => this.outgoing?.requestChanged(request));
  }

  /** Starts swtpm, builds the cloud-init image, starts qemu (paused) and connects to its QMP socket. */
  private async launch(
    settings: RunnerSettings,
    processes: { qemu: ProcessLaunch; swtpm?: ProcessLaunch; tpmStateDir?: string },
  ) {
    const paths = this.paths;
    const searchPath = this.env.PATH;
    if (processes.swtpm) {
      this.checkStop();
      this.swtpm = await startSwtpm({
        ...processes.swtpm,
        stateDir: processes.tpmStateDir ?? paths.swtpmStateDir,
        socket: paths.swtpmSocket,
        logger: this.logger,
        searchPath,
      });
    }
    if (settings.cloudInit) await buildNoCloudImage(paths.cloudInitImage, settings.cloudInit, searchPath);
    if (settings.sysprepDir) await buildSysprepImage(paths.sysprepImage, settings.sysprepDir, searchPath);
    await this.startRoutedNetwork(settings);

    this.checkStop();
    const { executable, args, environment } = processes.qemu;
    const logOutput = await this.startSerialLog(args);
    await rm(paths.monitorSocket, { force: true });
    this.logger.info({ executable, args, environment: Object.keys(environment) }, 'starting qemu');
    const qemu = await spawnChild('qemu', executable, args, { logger: this.logger, searchPath, environment });
    this.qemu = qemu;
    this.checkStop();
    this.store.update((state) => ({ ...state, qemuPid: qemu.pid }), { event: 'RUNNER_QEMU_STARTED' });

    const exitedDuringStart = (exit: ChildExit) =>
      new Error(`qemu ${describeExit(exit)} during start: ${qemu.stderrTail()}`);
    const qemuGone = qemu.exited.then((exit) => {
      throw exitedDuringStart(exit);
    });
    const connecting = QmpClient.connect(paths.monitorSocket, {
      connectTimeoutMs: QMP_CONNECT_TIMEOUT_MS,
      logger: this.logger,
    }).catch(async (err: unknown) => {
      // A monitor closed before its greeting is qemu ending, as a rule: its own words say why.
      const exit = await Promise.race([qemu.exited, sleep(QEMU_EXIT_GRACE_MS).then(() => undefined)]);
      throw exit ? exitedDuringStart(exit) : err;
    });
    this.qmp = await Promise.race([connecting, qemuGone]);
    this.qmp.on('event', (event: QmpEvent) => this.onEvent(event));
    // The guest has not run yet: the hub sees all it writes to its serial console.
    await this.consoleHub?.attachQemu(paths.consoleSocket, logOutput);
    this.checkStop();
  }

  /**
   * Marks the run's start in the serial log and keeps the log small; returns what the console hub
   * hands the guest's output to. A template that still has QEMU write the log (`logfile=…`) keeps
   * that: trimmed in place when QEMU appends (`logappend=on`), else left alone.
   */
  private async startSerialLog(qemuArgs: string[]): Promise<((output: Buffer) => void) | undefined> {
    const file = this.paths.consoleLog;
    const qemuLogs = qemuArgs.find((arg) => arg.includes('logfile='));
    if (qemuLogs && !qemuLogs.includes('logappend=on')) {
      this.logger.warn('the template keeps no appended serial log (logappend=on): it is not trimmed');
      return undefined;
    }
    await startRunInSerialLog(file, runMarker(this.store.snapshot.runId, new Date()));
    const onError = (err: unknown) => this.logger.warn({ err }, 'cannot write the serial log');
    if (qemuLogs) {
      this.serialLog = keepSerialLogSmall(file, onError);
      return undefined;
    }
    const writer = serialLogWriter(file, onError);
    this.serialLog = writer;
    return (output) => writer.append(output);
  }

  /** Brings the paused VM to its configured CPUs, RAM and display password, then lets it run. */
  private async configure(settings: RunnerSettings, secret: { password?: string; expiry?: string }) {
    const { vm } = settings;
    const qmp = this.qmp!;
    const controls = this.makeControls(qmp);
    await controls.cpus.setCpus(vm.currentCpus);
    await balloon(qmp, vm.currentRam ?? vm.maximumRam);
    // To the displays locked with one (none: a no-op).
    await controls.applyDisplayPassword(secret.password, secret.expiry);
    const cpus = await queryCpuCount(qmp);
    const ram = await queryBalloon(qmp);
    this.checkStop();
    await cont(qmp);
    this.guestRuns();
    this.store.update((state) => ({ ...state, phase: 'booting', cpus, ram }), { event: 'RUNNER_RESUMED' });
    this.logger.info({ cpus, ram }, 'VM running');
    // Disks attached while an earlier QEMU of this pod ran: the guest gets them again.
    this.enqueue('attaching disks', () => controls.hotplug.apply(vm.hotplugDisks));
  }

  private async shutDown(): Promise<void> {
    const qemu = this.qemu;
    const qmp = this.qmp;
    if (!qemu) return; // start() sees the request before it starts qemu
    if (!qmp || this.store.snapshot.phase === 'starting') {
      this.logger.info('stop requested during start; stopping qemu');
      await qemu.stop(QUIT_GRACE_MS);
      return;
    }
    this.store.update((state) => ({ ...state, phase: 'stopping' }), { event: 'RUNNER_STOPPING' });
    this.logger.info({ powerdownTimeout: this.powerdownTimeoutSeconds }, 'powering the guest down');
    // VM-Operator's order: the guest agent, then the ACPI power button, then powerdownTimeout.
    const pressPowerButton = () =>
      systemPowerdown(qmp).catch((err: unknown) => this.logger.warn({ err }, 'system_powerdown failed'));
    let pressed = false;
    if (await this.controls?.guestAgent.shutdown()) {
      this.logger.info('asked the guest agent to power the guest down');
    } else {
      await pressPowerButton();
      pressed = true;
    }
    // powerdownTimeout may change while we wait: look at it again every second. A press the guest
    // was not listening for yet (early in its boot) is lost: it is pressed again until then.
    const since = Date.now();
    let nextPressAt = since + (pressed ? POWER_BUTTON_REPEAT_MS : AGENT_SHUTDOWN_GRACE_MS);
    while (!qemu.hasExited()) {
      const now = Date.now();
      const remaining = this.powerdownTimeoutSeconds * 1000 - (now - since);
      if (remaining <= 0) break;
      if (now >= nextPressAt) {
        this.logger.info(
          pressed
            ? 'the guest has not powered down; pressing the power button again'
            : 'the guest agent did not power the guest down; pressing the power button',
        );
        await pressPowerButton();
        pressed = true;
        nextPressAt = Date.now() + POWER_BUTTON_REPEAT_MS;
      }
      await Promise.race([qemu.exited, sleep(Math.min(remaining, 1000))]);
    }
    if (qemu.hasExited()) return;
    this.logger.warn(
      { powerdownTimeout: this.powerdownTimeoutSeconds },
      'guest did not power down; quitting qemu',
    );
    await quit(qmp).catch((err: unknown) => this.logger.warn({ err }, 'quit failed'));
    await Promise.race([qemu.exited, sleep(QUIT_GRACE_MS)]);
    if (!qemu.hasExited()) {
      this.killedAfterQuit = true;
      this.logger.error('qemu did not quit; killing it');
      qemu.kill('SIGKILL');
    }
  }

  /** A routed network (the VM's own address): its tap must exist before QEMU opens it. */
  private async startRoutedNetwork(settings: RunnerSettings): Promise<void> {
    const routed = settings.vm.network.find((network) => network.type === 'routed');
    if (!routed?.address) return;
    await waitForTap(ROUTED_TAP, {
      logger: this.logger,
      timeoutMs: TAP_WAIT_MS,
      stopped: () => this.stopRequested,
    });
    this.checkStop();
    const lease = routedLease(routed.address, ROUTED_GATEWAY, await podNameservers(), settings.vm.name);
    this.dhcp = await startDhcpServer(lease, this.logger);
    const tcpPorts = (routed.ports ?? []).filter((port) => port.protocol === 'TCP').map((port) => port.port);
    this.portRelay = await startPortRelay(routed.address, tcpPorts, this.logger);
  }

  private async cleanUp(): Promise<void> {
    await this.dhcp?.close();
    await this.portRelay?.close();
    this.watch?.close();
    this.requests?.close();
    this.controls?.close();
    await this.serialLog?.close();
    await this.serial;
    await this.qmp?.close();
    const swtpm = this.swtpm;
    if (!swtpm) return;
    // It ends by itself once qemu, its client, is gone; a qemu that failed early never was its client.
    if (this.qmp) await Promise.race([swtpm.exited, sleep(SWTPM_GRACE_MS)]);
    if (!swtpm.hasExited()) this.logger.info('stopping swtpm');
    await swtpm.stop(SWTPM_GRACE_MS);
  }

  private finish(failure: string | undefined, exit: ChildExit | undefined): number {
    const snapshot = this.store.snapshot;
    let message = failure;
    if (!message && exit) {
      const orderly =
        this.abandonedStart ||
        (exit.code === 0 && (snapshot.lastShutdown !== undefined || this.stopRequested));
      if (!orderly || this.killedAfterQuit) {
        const stderr = this.qemu?.stderrTail().trim();
        message = `qemu ${describeExit(exit)} without an orderly shutdown${stderr ? `: ${stderr}` : ''}`;
      }
    }
    const phase = message ? 'failed' : 'stopped';
    const configError = this.configError;
    const startFailed = message !== undefined && !this.guestRan ? true : undefined;
    this.store.update(
      (state) => ({
        ...state,
        phase,
        message,
        configError,
        startFailed,
        booted: false,
        consoleClient: undefined,
      }),
      { event: 'RUNNER_EXITED', data: { ...(exit ?? {}), ...(message ? { message } : {}) } },
    );
    if (message) this.logger.error({ reason: message }, 'VM failed');
    else this.logger.info({ lastShutdown: snapshot.lastShutdown }, 'VM stopped');
    return message ? EXIT_FAILED : EXIT_CLEAN;
  }

  /** Runs `task` after the QMP operations before it; a failure is logged, never thrown. */
  private enqueue(what: string, task: () => Promise<void>) {
    this.serial = this.serial.then(task).catch((err: unknown) => this.logger.warn({ err }, `${what} failed`));
  }

  private onEvent(event: QmpEvent) {
    // qemu quits once the guest left: no shutdown of the guest's.
    if (this.migratedAway && event.event === 'SHUTDOWN') return;
    const qemu = this.qemu;
    const hostSignal =
      event.event === 'SHUTDOWN' &&
      (event.data as { reason?: unknown } | undefined)?.reason === 'host-signal';
    if (!this.heldEvents && !(hostSignal && qemu)) return this.fold(event);
    // A signal from outside: qemu wrote who sent it to stderr just before the event, and the
    // status and the Event say it (a VM stopped under a user's hands must say by whom).
    const says = hostSignal ? qemu?.stderrLine(QEMU_SIGNAL_LINE, QEMU_SAYS_WAIT_MS) : undefined;
    const held: Promise<void> = (this.heldEvents ?? Promise.resolve()).then(async () => {
      this.fold(event, await says);
      if (this.heldEvents === held) this.heldEvents = undefined;
    });
    this.heldEvents = held;
  }

  private fold(event: QmpEvent, qemuSays?: string) {
    this.store.update((state) => {
      const folded = foldEvent(state, event, eventTime(event), AGENT_PORT_ID);
      return qemuSays && folded.lastShutdown
        ? { ...folded, lastShutdown: { ...folded.lastShutdown, qemuSays } }
        : folded;
    }, event);
    this.controls?.onEvent(event);
  }

  private onFileChanged(file: string) {
    if (file === this.options.migration?.podInfoFile) {
      void readMigrationRequest(file).then((request) => this.outgoing?.requestChanged(request));
      return;
    }
    if (file === this.options.configPath) {
      this.enqueue('applying the changed config', () => this.applyConfigFile());
    } else {
      this.enqueue('applying the display secret', async () => this.controls?.applyDisplaySecret());
    }
  }

  private async applyConfigFile(): Promise<void> {
    const text = await readOptional(this.options.configPath);
    if (text === undefined) {
      this.logger.warn('the config file is gone; keeping the current config');
      return;
    }
    const parsed = parseRunnerConfig(text);
    if (!parsed.ok) {
      this.logger.error({ errors: parsed.errors }, 'the changed config is invalid; keeping the current one');
      return;
    }
    const previous = this.applied;
    this.applied = parsed.config;
    // A shutdown under way looks at it every second.
    this.powerdownTimeoutSeconds = parsed.config['/Runner'].vm.powerdownTimeout;
    await this.controls!.applyConfig(previous, parsed.config, text);
  }

  private keysDir(): string {
    return this.options.keysDir ?? path.join(path.dirname(this.options.configPath), 'migration');
  }

  /** The target: takes the guest in (migration/incoming.ts), then runs it as if it had started it. */
  private async takeOver(secret: { password?: string; expiry?: string }, incoming: Incoming): Promise<void> {
    const controls = this.makeControls(this.qmp!);
    await arriveIn(incoming, {
      qmp: this.qmp!,
      store: this.store,
      logger: this.logger,
      keysDir: this.keysDir(),
      imageRepository: this.paths.imageRepository,
      dataDir: this.paths.dataDir,
      qemuExited: this.qemu!.exited,
      ...(this.options.podIP && { address: this.options.podIP }),
      setDisplayPassword: () => controls.applyDisplayPassword(secret.password, secret.expiry),
      running: () => this.guestRuns(),
    });
    // No port event tells a migrated-in runner that the agent's port is open (it was before);
    // not awaited: the start must not wait for the agent.
    if (!this.store.snapshot.guestAgent?.connected)
      void controls.guestAgent
        .portChanged(true)
        .catch((err: unknown) =>
          this.logger.debug({ err: String(err) }, 'the guest agent does not answer (yet)'),
        );
  }

  private guestRuns(): void {
    this.guestRan = true;
    this.runningSince = new Date();
  }

  /** The guest runs in this pod now (its readiness): let run here, neither stopping nor moved away. */
  servesGuest(): boolean {
    // Asked from the first moment the pod runs: before the config is read there is no store yet.
    if (this.runningSince === undefined || this.migratedAway) return false;
    const { phase } = this.store.snapshot;
    return phase === 'booting' || phase === 'running';
  }

  /** What the VM uses now (for /metrics); undefined while QEMU does not run the guest. */
  async usage(): Promise<VmUsage | undefined> {
    const { qmp, qemu, controls, runningSince } = this;
    if (!qmp || !qemu || !controls || !runningSince || this.store.snapshot.phase === 'stopped')
      return undefined;
    // The guest's own view of its memory: its balloon driver reports it from the first ask on
    // (for this QEMU), so a guest nobody watches does no such work.
    if (this.guestStatsFor !== qemu) {
      this.guestStatsFor = qemu;
      enableGuestMemoryStats(qmp).catch((err: unknown) =>
        this.logger.debug({ err: String(err) }, "the guest's memory statistics are not available"),
      );
    }
    return sampleVmUsage({
      qmp,
      qemuPid: qemu.pid,
      guestInterfaces: (timeoutMs) => controls.guestAgent.interfaces(timeoutMs),
      guestAgentConnected: () => controls.guestAgent.connected,
      runningSince,
    });
  }

  /** What applies runtime changes to this QEMU (and speaks to the guest's agents). */
  private makeControls(qmp: QmpClient): RuntimeControls {
    return (this.controls = new RuntimeControls({
      qmp,
      store: this.store,
      paths: this.paths,
      logger: this.logger,
      keysDir: this.keysDir(),
      started: this.started,
      applied: () => this.applied,
      startedWithDisplayPassword: this.startedWithDisplayPassword,
      enqueue: (what, task) => this.enqueue(what, task),
    }));
  }
}
