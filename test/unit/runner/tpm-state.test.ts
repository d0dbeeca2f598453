import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { arrivedMarker } from '../../../src/runner/migration/request.js';
import {
  adoptArrivedTpmState,
  incomingTpmStateDir,
  withTpmStateDir,
} from '../../../src/runner/migration/tpm-state.js';

describe("a migrating guest's TPM state", () => {
  let dataDir: string;
  const stateDir = () => path.join(dataDir, 'swtpm');
  /** A state directory holding `content` as swtpm's permanent state. */
  const stateIn = async (dir: string, content: string) => {
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'tpm2-00.permall'), content);
  };
  const permall = (dir: string) => readFile(path.join(dir, 'tpm2-00.permall'), 'utf8');

  beforeEach(async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'vmop-tpm-state-'));
  });
  afterEach(() => rm(dataDir, { recursive: true, force: true }));

  it("the target's swtpm keeps it apart from the source's (whose lock it cannot take)", () => {
    const args = ['socket', '--tpm2', '--tpmstate', 'dir=/var/vm/swtpm', '--ctrl', 'type=unixio,path=/run/s'];
    expect(withTpmStateDir(args, incomingTpmStateDir('/var/vm', 'm1'))).toEqual([
      ...['socket', '--tpm2', '--tpmstate', 'dir=/var/vm/swtpm-migration-m1'],
      ...['--ctrl', 'type=unixio,path=/run/s'],
    ]);
  });

  it('a cold start takes the state of the newest migration the guest arrived by; the rest goes', async () => {
    await stateIn(stateDir(), 'before any migration');
    await stateIn(incomingTpmStateDir(dataDir, 'm1'), 'arrived by m1');
    await stateIn(incomingTpmStateDir(dataDir, 'm2'), 'arrived by m2');
    await stateIn(incomingTpmStateDir(dataDir, 'm3'), 'm3 failed: it never arrived');
    await writeFile(arrivedMarker(dataDir, 'm1'), '2026-11-25T10:00:00.000Z');
    await writeFile(arrivedMarker(dataDir, 'm2'), '2026-11-25T11:00:00.000Z');

    expect(await adoptArrivedTpmState(dataDir, stateDir())).toBe('m2');
    expect(await permall(stateDir())).toBe('arrived by m2');
    expect((await readdir(dataDir)).filter((name) => name.startsWith('swtpm')).sort()).toEqual(['swtpm']);
  });

  it('without an arrival its own state stays, and failed migrations leave nothing', async () => {
    await stateIn(stateDir(), 'its own');
    expect(await adoptArrivedTpmState(dataDir, stateDir())).toBeUndefined();
    await stateIn(incomingTpmStateDir(dataDir, 'm4'), 'never arrived');
    expect(await adoptArrivedTpmState(dataDir, stateDir())).toBeUndefined();
    expect(await permall(stateDir())).toBe('its own');
    expect(await readdir(dataDir)).toEqual(['swtpm']);
  });
});
