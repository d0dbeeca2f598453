// `vmop dev down` stops the supervisor its state file names, and nothing else: a state file whose
// supervisor died and whose pid another process took since must not take that process down.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VMOP_BIN, type DevState } from '../../src/devenv/dev-environment.js';
import { bystander, type Bystander } from '../support/recycled-pid.js';

const run = promisify(execFile);

/** A state file as a supervisor leaves it, naming `supervisor`; every other process in it is gone. */
function stateNaming(supervisor: { pid: number; startTime: number }): DevState & { supervisorPid: number } {
  const gone = { pid: 1_000_000, startTime: 0 };
  const network = { namespaces: [], hostInterface: 'none' };
  return {
    // What an older vmop wrote: it signalled this pid without a second look.
    supervisorPid: supervisor.pid,
    supervisor,
    processGroups: [],
    kubeconfig: '/nonexistent/kubeconfig',
    redisUrl: 'redis://127.0.0.1:1',
    managers: [
      { ...gone, log: '/nonexistent/manager.log', restarts: 0, metricsUrl: 'http://127.0.0.1:1/metrics' },
    ],
    redis: { layout: 'single', ...gone, restarts: 0 },
    cluster: {
      dir: '/nonexistent',
      node: 'vmop-node-1',
      nodes: ['vmop-node-1'],
      runnerImage: 'none',
      network,
    },
    controlPlane: [{ name: 'etcd', ...gone, restarts: 0 }],
    nodeServices: [],
    imageServer: {
      url: 'http://127.0.0.1:1',
      dir: '/nonexistent',
      testGuestDisk: '/nonexistent',
      accessLog: '/x',
    },
    imageRegistry: { address: '127.0.0.1:1', testGuestImage: 'none', noDiskImage: 'none' },
    web: { urls: [], issuer: 'http://127.0.0.1:1', people: [], password: 'none' },
    startedAt: new Date().toISOString(),
  };
}

describe('vmop dev down', () => {
  let dir: string;
  let stranger: Bystander;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-dev-down-'));
    stranger = await bystander(path.join(dir, 'signals'));
  });
  afterAll(async () => {
    await stranger?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('with a stale supervisor (its pid now another process of another start time) signals nothing', async () => {
    const recorded = { pid: stranger.ref.pid, startTime: stranger.ref.startTime - 1 };
    await writeFile(path.join(dir, 'state.json'), JSON.stringify(stateNaming(recorded)));
    const { stdout } = await run(VMOP_BIN, ['dev', 'down'], { env: { ...process.env, VMOP_DEV_DIR: dir } });
    expect(stdout.trim()).toBe('vmop dev is not running');
    expect(stranger.running()).toBe(true);
    expect(stranger.signals()).toEqual([]);
  });
});
