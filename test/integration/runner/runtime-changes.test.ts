import { rm } from 'node:fs/promises';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import { RunnerSnapshot, snapshotRedisKey } from '../../../src/api/runner-snapshot.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import type { SerialConsole } from '../../support/qemu.js';
import { eventually } from '../../support/eventually.js';
import { dashboardQueries, exports, sampleValue, seriesOf, VM_DASHBOARD } from '../../support/monitoring.js';
import { freePort } from '../../../src/util/free-port.js';
import { parseUsageHistory, usageHistoryKey } from '../../../src/api/vm-usage-history.js';
import {
  BOOT_TIMEOUT_MS,
  configYaml,
  makeEmptyDisk,
  makeImageRepository,
  makeTempDir,
  MiB,
  openConsole,
  ProjectedVolume,
  startRunner,
  waitForConsoleLog,
  waitGone,
  type RunnerProcess,
} from './harness.js';

const VM_KEY = 'vm:test-ns/changes';

/**
 * One runner with the test guest, publishing to a real Redis, its config in a kubelet-style
 * volume. The tests run in order against the same VM: boot, CPUs, RAM, CD media, stop.
 */
describe('runner: a running VM follows its config', () => {
  let tmp: string;
  let redis: RedisServer;
  let client: Redis;
  let volume: ProjectedVolume;
  let runner: RunnerProcess;
  let guestConsole: SerialConsole;
  let config: RunnerConfigInput;
  const seen: RunnerSnapshot[] = [];

  const readSnapshot = async () => {
    const text = await client.get(snapshotRedisKey(VM_KEY));
    if (!text) return undefined;
    const snapshot = RunnerSnapshot.parse(JSON.parse(text));
    if (seen.at(-1)?.seq !== snapshot.seq) seen.push(snapshot);
    return snapshot;
  };
  const waitForSnapshot = async (predicate: (snapshot: RunnerSnapshot) => boolean, what: string) => {
    const deadline = Date.now() + BOOT_TIMEOUT_MS;
    for (;;) {
      const snapshot = await readSnapshot();
      if (snapshot && predicate(snapshot)) return snapshot;
      if (Date.now() > deadline)
        throw new Error(`no snapshot with ${what}; last: ${JSON.stringify(snapshot)}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  const changeVm = async (change: Partial<RunnerConfigInput['/Runner']['vm']>) => {
    config = { '/Runner': { ...config['/Runner'], vm: { ...config['/Runner'].vm, ...change } } };
    await volume.update({ 'config.yaml': configYaml(config) });
  };
  // The CD, and a disk the guest writes to (its bytes show in the runner's metrics).
  const cd = (file: string) => [
    { type: 'ide-cd' as const, file },
    { type: 'raw' as const, file: path.join(tmp, 'disk.img') },
  ];
  let metricsPort: number;
  const scrape = async () => {
    const response = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    expect(response.status).toBe(200);
    return response.text();
  };

  beforeAll(async () => {
    tmp = await makeTempDir('runner-changes');
    redis = await startRedis();
    client = new Redis(redis.url);
    const images = await makeImageRepository(path.join(tmp, 'images'), ['a', 'b']);
    await makeEmptyDisk(path.join(tmp, 'disk.img'), 32 * MiB);
    metricsPort = await freePort();
    config = {
      '/Runner': {
        dataDir: path.join(tmp, 'data'),
        runtimeDir: path.join(tmp, 'run'),
        template: 'test-guest.liquid',
        imageRepository: images,
        vm: {
          name: 'changes',
          maximumCpus: 2,
          currentCpus: 1,
          maximumRam: '256Mi',
          network: [{ type: 'user' }],
          drives: cd('a.iso'),
        },
      },
    };
    volume = await ProjectedVolume.create(path.join(tmp, 'etc'), { 'config.yaml': configYaml(config) });
    runner = await startRunner(volume.file('config.yaml'), {
      env: {
        ...process.env,
        VMOP_REDIS_URL: redis.url,
        VMOP_VM_KEY: VM_KEY,
        VMOP_POD_NAME: 'changes-0',
        VMOP_METRICS_PORT: String(metricsPort),
        VMOP_NODE_NAME: 'node-a',
      },
    });
  });

  afterAll(async () => {
    guestConsole?.close();
    await runner?.stop();
    client?.disconnect();
    await redis?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  it('boots the guest and publishes its state', async () => {
    const booted = await waitForSnapshot((snapshot) => snapshot.booted, 'booted');
    expect(booted).toMatchObject({
      phase: 'running',
      pod: 'changes-0',
      cpus: 1,
      drives: { cd0: { tray: 'closed', medium: 'a.iso' } },
    });
    await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
    guestConsole = await openConsole(
      path.join(tmp, 'run/console-sessions.sock'),
      path.join(tmp, 'console-client.log'),
    );
    expect(await guestConsole.run('true')).toBe(0);
    // Ready (the pod's readiness probe): the guest runs here.
    expect((await fetch(`http://127.0.0.1:${metricsPort}/readyz`)).status).toBe(200);
  });

  it('hot-plugs a CPU the guest onlines, and unplugs it again', async () => {
    const from = guestConsole.output.length;
    await changeVm({ currentCpus: 2 });
    await guestConsole.waitForLine(/vmop-guest: cpu1 online$/, { from });
    await waitForSnapshot((snapshot) => snapshot.cpus === 2, '2 CPUs');

    await changeVm({ currentCpus: 1 });
    await waitForSnapshot((snapshot) => snapshot.cpus === 1, '1 CPU');
  });

  it('balloons the RAM down and reports the size the guest gave back', async () => {
    await changeVm({ currentRam: '192Mi' });
    const snapshot = await waitForSnapshot((candidate) => candidate.ram === 192 * MiB, 'ram 192 MiB');
    expect(snapshot.ram).toBe(192 * MiB);
  });

  it('serves what the VM uses: CPU time rising while the guest works, disk bytes by what it wrote, its traffic and memory', async () => {
    const vm = { namespace: 'test-ns', name: 'changes', node: 'node-a' };
    const before = await scrape();
    const cpu = (metrics: string) => sampleValue(metrics, 'vmop_vm_vcpu_seconds_total', { ...vm, id: '0' })!;
    const written = (metrics: string) =>
      sampleValue(metrics, 'vmop_vm_storage_write_traffic_bytes_total', { ...vm, drive: 'disk0' })!;
    const sent = (metrics: string) =>
      sampleValue(metrics, 'vmop_vm_network_transmit_packets_total', {
        ...vm,
        interface: 'virtio-net-pci.0',
      })!;
    expect(cpu(before)).toBeGreaterThan(0);
    expect(sampleValue(before, 'vmop_vm_memory_domain_bytes', vm)).toBe(192 * MiB);
    expect(sampleValue(before, 'vmop_vm_memory_resident_bytes', vm)).toBeGreaterThan(64 * MiB);
    expect(sampleValue(before, 'vmop_vm_guest_agent_connected', vm)).toBe(1);

    // Work that costs the vCPU about 6 s under TCG here; the threshold leaves room for faster hosts.
    expect(await guestConsole.run('i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done')).toBe(0);
    expect(await guestConsole.run('dd if=/dev/zero of=/dev/vda bs=1M count=8 conv=fsync 2>/dev/null')).toBe(
      0,
    );
    await guestConsole.run('ping -c 3 -W 1 10.0.2.2 >/dev/null'); // sent, answered or not
    const after = await scrape();
    // Every series the chart's one-VM dashboard reads is one the runner exports.
    for (const { panel, expr } of dashboardQueries(VM_DASHBOARD))
      for (const series of seriesOf(expr)) expect(exports(after, series), `${panel}: ${series}`).toBe(true);
    expect(cpu(after) - cpu(before)).toBeGreaterThan(2);
    expect(sampleValue(after, 'vmop_vm_cpu_usage_seconds_total', vm)).toBeGreaterThanOrEqual(cpu(after));
    const wrote = written(after) - written(before);
    expect(Math.abs(wrote - 8 * MiB)).toBeLessThanOrEqual(0.1 * 8 * MiB);
    expect(sent(after) - sent(before)).toBeGreaterThanOrEqual(3);
    // The guest's balloon driver tells its own view of the memory every 10 s.
    await eventually(async () => {
      const usable = sampleValue(await scrape(), 'vmop_vm_memory_usable_bytes', vm);
      expect(usable).toBeGreaterThan(0);
      expect(usable).toBeLessThan(192 * MiB);
    }, 30_000);
    // And the last hour's samples for the GUI's VM page, in the VM's Redis keys: the disk's write in them.
    await eventually(async () => {
      const latest = parseUsageHistory(await client.get(usageHistoryKey(VM_KEY))).at(-1)?.record;
      expect(latest?.diskWrite).toBeGreaterThanOrEqual(8 * MiB);
      expect(latest?.cpu).toBeGreaterThan(0);
    }, 30_000);
  });

  it('changes a CD the guest has locked once the guest ejects it', async () => {
    expect(await guestConsole.run('mount -r /dev/sr0 /mnt && grep -qx disc-a /mnt/id.txt')).toBe(0);
    await changeVm({ drives: cd('b.iso') });
    const waiting = await waitForSnapshot(
      (snapshot) => snapshot.drives.cd0?.pendingMedium === 'b.iso',
      'pending',
    );
    expect(waiting.drives.cd0).toMatchObject({ tray: 'closed', medium: 'a.iso', locked: true });

    expect(await guestConsole.run('umount /mnt && eject /dev/sr0')).toBe(0);
    const changed = await waitForSnapshot((snapshot) => snapshot.drives.cd0?.medium === 'b.iso', 'medium b');
    // The runner retries the tray every second once the guest has unmounted, so it may insert the
    // new medium between the guest's umount and eject; the eject then opens the tray on disc b.
    expect(changed.drives.cd0).toMatchObject({ medium: 'b.iso' });
    expect(changed.drives.cd0).not.toHaveProperty('pendingMedium');
    expect(changed.drives.cd0).not.toHaveProperty('locked');
    // Reading the drive closes its tray (the guest's autoclose): disc b is in, and status says so.
    expect(
      await guestConsole.run('mount -r /dev/sr0 /mnt && grep -qx disc-b /mnt/id.txt && umount /mnt'),
    ).toBe(0);
    await waitForSnapshot(
      (snapshot) => snapshot.drives.cd0?.tray === 'closed' && snapshot.drives.cd0.medium === 'b.iso',
      'tray closed on b',
    );
  });

  it('changes a CD the guest has locked once the guest lets go of it, without an eject (no udev)', async () => {
    expect(await guestConsole.run('mount -r /dev/sr0 /mnt && grep -qx disc-b /mnt/id.txt')).toBe(0);
    await changeVm({ drives: cd('a.iso') });
    await waitForSnapshot((snapshot) => snapshot.drives.cd0?.pendingMedium === 'a.iso', 'pending');
    expect(await guestConsole.run('umount /mnt')).toBe(0);
    const changed = await waitForSnapshot((snapshot) => snapshot.drives.cd0?.medium === 'a.iso', 'medium a');
    expect(changed.drives.cd0).toEqual({ tray: 'closed', medium: 'a.iso' });
    expect(
      await guestConsole.run('mount -r /dev/sr0 /mnt && grep -qx disc-a /mnt/id.txt && umount /mnt'),
    ).toBe(0);
  });

  it('ejects with an empty image and inserts into an unlocked drive at once', async () => {
    await changeVm({ drives: cd('') });
    const ejected = await waitForSnapshot(
      (snapshot) => snapshot.drives.cd0?.medium === undefined,
      'no medium',
    );
    expect(ejected.drives.cd0).toEqual({ tray: 'open' });

    await changeVm({ drives: cd('a.iso') });
    await waitForSnapshot((snapshot) => snapshot.drives.cd0?.medium === 'a.iso', 'medium a');
    expect(
      await guestConsole.run('mount -r /dev/sr0 /mnt && grep -qx disc-a /mnt/id.txt && umount /mnt'),
    ).toBe(0);
  });

  it('reports changes that need a restart without applying them', async () => {
    await changeVm({ maximumRam: '512Mi' });
    const snapshot = await waitForSnapshot((candidate) => candidate.restartChanges !== undefined, 'pending');
    expect(snapshot.restartChanges).toEqual([
      { field: 'vm.maximumRam', current: 256 * MiB, desired: 512 * MiB },
    ]);
    expect(snapshot.ram).toBe(192 * MiB);
  });

  it('stores each change with a higher seq, all of one run', async () => {
    const seqs = seen.map((snapshot) => snapshot.seq);
    expect(seqs.length).toBeGreaterThan(5);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seen.map((snapshot) => snapshot.runId)).size).toBe(1);
  });

  it('powers the guest down on SIGTERM and exits 0', async () => {
    const { qemuPid } = (await readSnapshot())!;
    runner.kill('SIGTERM');
    expect(await runner.exited).toEqual({ code: 0, signal: null });
    await waitGone(qemuPid!);
    const last = (await readSnapshot())!;
    expect(last).toMatchObject({ phase: 'stopped', lastShutdown: { guest: true, reason: 'guest-shutdown' } });
  });
});
