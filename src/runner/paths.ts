import path from 'node:path';
import { DEFAULT_IMAGE_REPOSITORY, type RunnerSettings } from '../api/runner-config.js';

/** Where the runner keeps its files; every socket name the templates and the runner agree on. */
export interface RunnerPaths {
  dataDir: string;
  runtimeDir: string;
  monitorSocket: string;
  swtpmSocket: string;
  swtpmStateDir: string;
  consoleSocket: string;
  /** The runner's serial console hub: each console session connects here (console/serial-hub.ts). */
  consoleSessionsSocket: string;
  /** The serial output; in the data volume, so that it outlives the runner pod. */
  consoleLog: string;
  agentSocket: string;
  guestAgentSocket: string;
  /** Where the NoCloud image is written (only used when cloudInit is configured). */
  cloudInitImage: string;
  /** Where the sysprep CD image is written (only used when sysprepDir is configured). */
  sysprepImage: string;
  imageRepository: string;
  displaySecretDir: string;
}

const APP_DIR = 'vmrunner';

/** A VM name as one safe path component (names are user input and may contain "/" or ".."). */
export function vmDirectoryName(vmName: string): string {
  const safe = vmName.replace(/[^A-Za-z0-9._-]/g, '_');
  return /^\.+$/.test(safe) ? safe.replace(/\./g, '_') : safe;
}

/** Upstream's defaults: $XDG_RUNTIME_DIR, then /tmp/$USER, then /tmp. */
export function defaultRuntimeDir(vmName: string, env: NodeJS.ProcessEnv): string {
  const base = env.XDG_RUNTIME_DIR
    ? path.join(env.XDG_RUNTIME_DIR, APP_DIR)
    : env.USER
      ? path.join('/tmp', env.USER, APP_DIR)
      : path.join('/tmp', APP_DIR);
  return path.join(base, vmDirectoryName(vmName));
}

/** Upstream's defaults: $XDG_DATA_HOME, then ~/.local/share, then the working directory. */
export function defaultDataDir(vmName: string, env: NodeJS.ProcessEnv, cwd: string): string {
  const base = env.XDG_DATA_HOME
    ? path.join(env.XDG_DATA_HOME, APP_DIR)
    : env.HOME
      ? path.join(env.HOME, '.local', 'share', APP_DIR)
      : cwd;
  return path.join(base, vmDirectoryName(vmName));
}

export function runnerPaths(
  settings: RunnerSettings,
  context: { configPath: string; env: NodeJS.ProcessEnv; cwd: string },
): RunnerPaths {
  const { env, cwd } = context;
  const runtimeDir = path.resolve(cwd, settings.runtimeDir ?? defaultRuntimeDir(settings.vm.name, env));
  const dataDir = path.resolve(cwd, settings.dataDir ?? defaultDataDir(settings.vm.name, env, cwd));
  return {
    dataDir,
    runtimeDir,
    monitorSocket: path.join(runtimeDir, 'monitor.sock'),
    swtpmSocket: path.join(runtimeDir, 'swtpm-sock'),
    swtpmStateDir: path.join(dataDir, 'swtpm'),
    consoleSocket: path.join(runtimeDir, 'console.sock'),
    consoleSessionsSocket: path.join(runtimeDir, 'console-sessions.sock'),
    consoleLog: path.join(dataDir, 'console.log'),
    agentSocket: path.join(runtimeDir, 'org.jdrupes.vmop_agent.0'),
    guestAgentSocket: path.join(runtimeDir, 'org.qemu.guest_agent.0'),
    cloudInitImage: path.join(runtimeDir, 'cloud-init.img'),
    sysprepImage: path.join(runtimeDir, 'sysprep.iso'),
    imageRepository: env.VMOP_IMAGE_REPOSITORY || settings.imageRepository || DEFAULT_IMAGE_REPOSITORY,
    displaySecretDir: path.resolve(cwd, settings.displaySecretDir ?? path.dirname(context.configPath)),
  };
}
