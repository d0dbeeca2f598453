// `vmop dev`: a whole local vmop in the background (control plane, Redis, two manager replicas,
// the node agent), supervised by one detached process whose state file says where things are.
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { createLogger } from '../util/logger.js';
import { isAlive } from '../util/process.js';
import { startControlPlane } from './control-plane.js';
import { installCrds } from './install-crds.js';
import { spawnLogged, type LoggedProcess } from './logged-process.js';
import { startOrphanReaper } from './orphan-reaper.js';
import { startRedis } from './redis.js';
import { ensureTestGuest } from './test-guest.js';

export const MANAGER_REPLICAS = 2;

/** The vmop launcher of this checkout (node + tsx loader in one process, so signals reach vmop). */
export const VMOP_BIN = resolve(dirname(fileURLToPath(import.meta.url)), '../../bin/vmop');

export function devDir(): string {
  return process.env.VMOP_DEV_DIR ?? join(homedir(), '.vmop', 'dev');
}

export const DevState = z.object({
  supervisorPid: z.number().int(),
  kubeconfig: z.string(),
  redisUrl: z.string(),
  managers: z.array(z.object({ pid: z.number().int(), log: z.string() })),
  node: z.object({ pid: z.number().int(), log: z.string(), stateDir: z.string() }),
  imageRepository: z.string(),
  startedAt: z.string(),
});
export type DevState = z.infer<typeof DevState>;

const stateFile = (dir: string) => join(dir, 'state.json');

/** The running environment's state, or undefined when none runs. */
export function readDevState(dir = devDir()): DevState | undefined {
  if (!existsSync(stateFile(dir))) return undefined;
  const state = DevState.parse(JSON.parse(readFileSync(stateFile(dir), 'utf8')));
  return isAlive(state.supervisorPid) ? state : undefined;
}

/**
 * Runs the environment in this process until SIGTERM/SIGINT. Every child is adopted by an orphan
 * reaper, so even a SIGKILL of this supervisor leaves no process behind.
 */
export async function superviseDevEnvironment(dir = devDir()): Promise<void> {
  const logger = createLogger('dev');
  mkdirSync(dir, { recursive: true });
  rmSync(stateFile(dir), { force: true });
  const reaper = startOrphanReaper({ logger });
  const controlPlane = await startControlPlane({ logger }); // reaps its own processes
  const redis = await startRedis();
  reaper.adopt(redis.pid);
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, controlPlane.kubeconfigYaml, { mode: 0o600 });
  await installCrds(controlPlane.kubeConfig);

  const imageRepository = join(dir, 'images');
  mkdirSync(imageRepository, { recursive: true });
  const guest = await ensureTestGuest();
  rmSync(join(imageRepository, 'test-guest'), { force: true });
  symlinkSync(guest.dir, join(imageRepository, 'test-guest'));

  const children: LoggedProcess[] = [];
  const start = async (name: string, args: string[]) => {
    const child = await spawnLogged(name, VMOP_BIN, args, join(dir, `${name}.log`));
    reaper.adopt(child.pid);
    children.push(child);
    return child;
  };
  const managers = [];
  for (let replica = 1; replica <= MANAGER_REPLICAS; replica++) {
    managers.push(
      await start(`manager-${replica}`, [
        'manager',
        '--kubeconfig',
        kubeconfig,
        '--redis',
        redis.url,
        '--metrics-port',
        '0',
      ]),
    );
  }
  const nodeStateDir = join(dir, 'node');
  const node = await start('node', [
    ...['node', '--kubeconfig', kubeconfig, '--state-dir', nodeStateDir],
    ...['--image-repository', imageRepository, '--runner-env', `VMOP_REDIS_URL=${redis.url}`],
  ]);

  const state: DevState = {
    supervisorPid: process.pid,
    kubeconfig,
    redisUrl: redis.url,
    managers: managers.map((m) => ({ pid: m.pid, log: m.logPath })),
    node: { pid: node.pid, log: node.logPath, stateDir: nodeStateDir },
    imageRepository,
    startedAt: new Date().toISOString(),
  };
  writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));
  logger.info(state, 'dev environment up');

  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  logger.info('stopping the dev environment');
  rmSync(stateFile(dir), { force: true });
  // The node first: it powers the VMs down while the managers and the apiserver still run.
  await node.stop(120_000);
  await Promise.all(managers.map((m) => m.stop(30_000)));
  await redis.stop();
  await controlPlane.stop();
  await reaper.release();
  logger.info('dev environment stopped');
}
