// What changes a running VM (VM-Operator's runner "controllers"): a changed config, display
// secret or reset request applied to the running QEMU, QEMU's device events followed, and the
// guest's agents spoken to. VmRunner owns the VM's lifecycle (start, stop, exit) and makes one of
// these once QEMU answers on QMP.
import { configDigest, type RunnerConfig } from '../api/runner-config.js';
import type { Logger } from '../util/logger.js';
import { liveChanges, restartChanges, type LiveChanges } from './config-diff.js';
import { CdromController } from './controllers/cdrom.js';
import { CpuController } from './controllers/cpus.js';
import { DisplayController, displaySecretFiles } from './controllers/display.js';
import { DiskController } from './controllers/disks.js';
import { HotplugController } from './controllers/hotplug.js';
import { SnapshotCopyController } from './controllers/snapshot-copy.js';
import { GuestAgentController } from './guest-agent/controller.js';
import type { RunnerPaths } from './paths.js';
import type { QmpClient, QmpEvent } from './qmp/client.js';
import { balloon, queryCpuCount, systemReset } from './qmp/commands.js';
import { DeviceDeletedData, TrayMovedData, VserportChangeData, type VmEvent } from './qmp/events.js';
import type { SnapshotStore } from './snapshot/store.js';
import { AGENT_PORT_ID, GUEST_AGENT_PORT_ID } from './template/context.js';
import { AgentLogin } from './vmop-agent/login.js';
import { readOptional } from './read-optional.js';

export interface RuntimeContext {
  qmp: QmpClient;
  store: SnapshotStore;
  paths: RunnerPaths;
  logger: Logger;
  /** Where the VM's key file appears (attached disks' TLS). */
  keysDir: string;
  /** The config QEMU was started with. */
  started: RunnerConfig;
  /** The config applied last (the runner's). */
  applied(): RunnerConfig;
  /** Whether QEMU started with SPICE ticketing on (it cannot switch while it runs). */
  startedWithDisplayPassword: boolean;
  /** Runs `task` after the QMP operations before it; a failure is logged, never thrown. */
  enqueue(what: string, task: () => Promise<void>): void;
}

export class RuntimeControls {
  readonly cpus: CpuController;
  readonly cdroms: CdromController;
  readonly disks: DiskController;
  readonly hotplug: HotplugController;
  readonly guestAgent: GuestAgentController;
  readonly snapshotCopy: SnapshotCopyController;
  private readonly display: DisplayController;
  private readonly agentLogin: AgentLogin;
  private displayPasswordNeedsRestart = false;

  constructor(private readonly ctx: RuntimeContext) {
    const { qmp, store, paths, logger } = ctx;
    this.cpus = new CpuController(qmp, logger);
    this.cdroms = new CdromController(qmp, store, paths.imageRepository, logger, (what, task) =>
      ctx.enqueue(what, task),
    );
    const { spice, vnc } = ctx.started['/Runner'].vm.display;
    this.display = new DisplayController(qmp, logger, [
      // SPICE takes a password only when it started with ticketing on.
      ...(spice && ctx.startedWithDisplayPassword ? (['spice'] as const) : []),
      ...(vnc ? (['vnc'] as const) : []),
    ]);
    this.disks = new DiskController(qmp, logger);
    this.hotplug = new HotplugController(
      qmp,
      ctx.keysDir,
      (volume, disk) =>
        store.update(
          (state) => {
            const { [volume]: _gone, ...others } = state.hotplugDisks ?? {};
            const hotplugDisks = disk ? { ...others, [volume]: disk } : others;
            return {
              ...state,
              hotplugDisks: Object.keys(hotplugDisks).length > 0 ? hotplugDisks : undefined,
            };
          },
          { event: 'RUNNER_DISK_HOTPLUG', data: { volume, ...disk } },
        ),
      (what, task) => ctx.enqueue(what, task),
      logger,
    );
    this.agentLogin = new AgentLogin(
      paths.agentSocket,
      () => store.snapshot.booted,
      (user) =>
        store.update((state) => ({ ...state, loggedInUser: user }), {
          event: 'RUNNER_AGENT_LOGIN',
          data: { user },
        }),
      logger,
    );
    this.agentLogin.setUser(ctx.applied()['/Runner'].vm.display.loggedInUser);
    this.guestAgent = new GuestAgentController(paths.guestAgentSocket, store, logger);
    this.snapshotCopy = new SnapshotCopyController({
      qmp,
      drives: ctx.started['/Runner'].vm.drives,
      attached: () => ctx.applied()['/Runner'].vm.hotplugDisks.map((disk) => disk.volume),
      credentials: () => this.hotplug.ensureCredentials(),
      agent: () => this.guestAgent.freezer(),
      publish: (snapshotCopy) =>
        store.update((state) => ({ ...state, snapshotCopy }), {
          event: 'RUNNER_SNAPSHOT_COPY',
          data: { ...snapshotCopy },
        }),
      logger,
    });
  }

  close(): void {
    this.cdroms.close();
    this.hotplug.close();
    this.guestAgent.close();
    this.agentLogin.close();
  }

  /** Follows QEMU's device events: the agents' ports, CD trays, CPUs that come and go. */
  onEvent(event: QmpEvent): void {
    switch (event.event) {
      case 'VSERPORT_CHANGE': {
        const data = VserportChangeData.safeParse(event.data);
        if (data.success && data.data.id === AGENT_PORT_ID) this.agentLogin.portChanged(data.data.open);
        if (data.success && data.data.id === GUEST_AGENT_PORT_ID) {
          this.guestAgent
            .portChanged(data.data.open)
            .catch((err: unknown) => this.ctx.logger.warn({ err }, 'the guest agent does not answer'));
        }
        return;
      }
      case 'DEVICE_TRAY_MOVED': {
        const data = TrayMovedData.safeParse(event.data);
        if (data.success)
          this.ctx.enqueue('CD change', () => this.cdroms.trayMoved(data.data.id, data.data['tray-open']));
        return;
      }
      case 'DEVICE_DELETED': {
        const data = DeviceDeletedData.safeParse(event.data);
        if (data.success) this.cpus.deviceDeleted(data.data.device);
        this.ctx.enqueue('CPU count', () => this.refreshCpuCount(event));
        return;
      }
      case 'ACPI_DEVICE_OST':
        this.ctx.enqueue('CPU count', () => this.refreshCpuCount(event));
        return;
    }
  }

  private async refreshCpuCount(event: VmEvent) {
    const { qmp, store } = this.ctx;
    if (qmp.closed) return;
    const cpus = await queryCpuCount(qmp);
    store.update((state) => ({ ...state, cpus }), event);
  }

  /**
   * Applies what changed from `previous` to `next` (the config now applied, whose text is `text`)
   * to the running VM; what waits for a restart is published. Returns the changes.
   */
  async applyConfig(previous: RunnerConfig, next: RunnerConfig, text: string): Promise<LiveChanges> {
    const { logger } = this.ctx;
    const changes = liveChanges(this.ctx.started, previous, next);
    const resetRequest = next['/Runner'].resetRequest;
    const reset = resetRequest !== undefined && resetRequest !== previous['/Runner'].resetRequest;
    logger.info({ changes }, 'config changed');
    const attempt = async (what: string, action: () => Promise<void>) =>
      action().catch((err: unknown) => logger.warn({ err }, `${what} failed`));
    if (changes.currentCpus !== undefined) {
      const cpus = changes.currentCpus;
      await attempt('changing the CPUs', () => this.cpus.setCpus(cpus));
    }
    if (changes.currentRam !== undefined) {
      const ram = changes.currentRam;
      await attempt('changing the RAM', () => balloon(this.ctx.qmp, ram));
    }
    for (const { id, image } of changes.cdMedia)
      await attempt(`changing the medium of ${id}`, () => this.cdroms.change(id, image));
    for (const { id, bytes } of changes.diskSizes)
      await attempt(`growing disk ${id}`, () => this.disks.grow(id, bytes));
    await attempt('attaching and detaching disks', () => this.hotplug.apply(next['/Runner'].vm.hotplugDisks));
    await attempt("a snapshot's copy", () => this.snapshotCopy.apply(next['/Runner'].vm.snapshotCopy));
    if ('loggedInUser' in changes) this.agentLogin.setUser(changes.loggedInUser);
    if (reset) await attempt('resetting the guest', () => this.reset(resetRequest));
    this.publishRestartChanges({ event: 'RUNNER_CONFIG_CHANGED', data: { ...changes } }, configDigest(text));
    return changes;
  }

  private async reset(request: string): Promise<void> {
    this.ctx.logger.info({ request }, 'resetting the guest');
    await systemReset(this.ctx.qmp);
    this.ctx.store.update((state) => ({ ...state, lastReset: { request, at: new Date().toISOString() } }), {
      event: 'RUNNER_RESET',
      data: { request },
    });
  }

  /** Publishes what waits for a restart, and `config`, the digest of a config just applied. */
  private publishRestartChanges(event: VmEvent, config?: string) {
    const { started, startedWithDisplayPassword, logger } = this.ctx;
    const pending = restartChanges(started, this.ctx.applied());
    if (this.displayPasswordNeedsRestart && !pending.some((change) => change.field === 'displaySecretDir')) {
      // qemu cannot switch SPICE ticketing on or off while it runs.
      const state = (locked: boolean) => (locked ? 'password set' : 'no password');
      pending.push({
        field: 'displaySecretDir',
        current: state(startedWithDisplayPassword),
        desired: state(!startedWithDisplayPassword),
      });
    }
    if (pending.length > 0)
      logger.info({ pending: pending.map((c) => c.field) }, 'changes that need a restart');
    this.ctx.store.update(
      (state) => ({
        ...state,
        config: config ?? state.config,
        restartChanges: pending.length > 0 ? pending : undefined,
      }),
      event,
    );
  }

  /** The display Secret's files changed: the new password, or a restart when ticketing must switch. */
  async applyDisplaySecret(): Promise<void> {
    const { spice, vnc } = this.ctx.started['/Runner'].vm.display;
    if (!spice && !vnc) return;
    const secret = displaySecretFiles(this.ctx.paths.displaySecretDir);
    const password = await readOptional(secret.password);
    // qemu cannot switch SPICE ticketing on or off while it runs (VNC is always locked).
    this.displayPasswordNeedsRestart =
      spice !== undefined && this.ctx.startedWithDisplayPassword !== (password !== undefined);
    // Only to the displays that can take it (DisplayController's protocols).
    await this.applyDisplayPassword(password, await readOptional(secret.expiry));
    this.publishRestartChanges({ event: 'RUNNER_DISPLAY_SECRET_CHANGED' });
  }

  async applyDisplayPassword(password: string | undefined, expiry: string | undefined): Promise<void> {
    if (!(await this.display.apply(password, expiry))) return;
    this.ctx.store.update(
      (state) => ({ ...state, displayPasswordSerial: (state.displayPasswordSerial ?? 0) + 1 }),
      { event: 'RUNNER_DISPLAY_PASSWORD_SET' },
    );
  }
}
