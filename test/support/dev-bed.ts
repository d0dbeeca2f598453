// A `vmop dev` environment (one node, or more) for one test file: made before its tests, gone after.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import {
  startDevEnvironment,
  type DevEnvironment,
  type RedisLayout,
} from '../../src/devenv/dev-environment.js';
import { clusterVms, type ClusterVms } from './cluster-vms.js';

export interface DevBed {
  env: DevEnvironment;
  vms: ClusterVms;
}

/** Registers the hooks; the bed's fields are there once the file's beforeAll hooks ran. */
export function devBed(name: string, namespace: string, nodes = 1, redis: RedisLayout = 'single'): DevBed {
  const bed = {} as DevBed;
  let dir: string | undefined;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), `vmop-e2e-${name}-`));
    bed.env = await startDevEnvironment({ dir, nodes, redis });
    bed.vms = clusterVms(bed.env.state.kubeconfig, namespace);
  }, 1_800_000);
  afterAll(async () => {
    await bed.env?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 600_000);
  return bed;
}
