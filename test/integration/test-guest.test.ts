import { execFile } from 'node:child_process';
import { appendFileSync, cpSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureTestGuest, TEST_GUEST_READY_MARKER, type TestGuest } from '../../src/devenv/test-guest.js';
import { QmpClient, QmpError, type QmpEvent } from '../../src/runner/qmp/client.js';
import { launchTestGuest, type TestQemu } from '../support/qemu.js';

const run = promisify(execFile);
const buildScript = fileURLToPath(new URL('../../scripts/build-test-guest.sh', import.meta.url));
const MiB = 1024 * 1024;
// Generous: several TCG guests may boot at once on two cores.
const BOOT_TIMEOUT_MS = 120_000;

interface HotpluggableCpu {
  type: string;
  props: Record<string, number>;
  'qom-path'?: string;
}
interface BlockDevice {
  qdev?: string;
  locked: boolean;
  tray_open?: boolean;
}

describe('test guest build', () => {
  let scratch: string;
  beforeAll(() => {
    scratch = mkdtempSync(path.join(os.tmpdir(), 'vmop-guest-build-'));
  });
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('is cached: a second run prints the same directory and leaves the files alone', async () => {
    const guest = await ensureTestGuest();
    expect(path.basename(guest.dir)).toMatch(/^\d+\.\d+\.\d+-\d+-cloud-amd64-[0-9a-f]{12}$/);
    const built = statSync(guest.initrd).mtimeMs;
    const { stdout } = await run('bash', [buildScript]);
    expect(stdout.trim()).toBe(guest.dir);
    expect(statSync(guest.initrd).mtimeMs).toBe(built);
  });

  it('builds into an empty cache and rebuilds under a new key when the guest files change', async () => {
    // A copy of the build inputs, so changing them does not touch the work tree.
    mkdirSync(path.join(scratch, 'scripts'));
    cpSync(buildScript, path.join(scratch, 'scripts/build-test-guest.sh'));
    cpSync(path.join(path.dirname(buildScript), 'test-guest'), path.join(scratch, 'scripts/test-guest'), {
      recursive: true,
    });
    const env = { ...process.env, VMOP_CACHE_DIR: path.join(scratch, 'cache') };
    const build = async () =>
      (await run('bash', [path.join(scratch, 'scripts/build-test-guest.sh')], { env })).stdout.trim();

    const first = await build();
    expect(path.dirname(first)).toBe(path.join(scratch, 'cache/test-guest'));
    const { stdout: listing } = await run('sh', ['-c', `cpio -it --quiet < '${first}/initrd.img'`]);
    const files = listing.split('\n');
    expect(files).toEqual(
      expect.arrayContaining(['init', 'bin/busybox', 'bin/sh', 'bin/eject', 'etc/inittab']),
    );
    // The modules the guest needs, and some of their dependencies.
    const modules = ['virtio_pci', 'virtio_balloon', 'virtio_blk', 'virtio_scsi', 'sr_mod', 'isofs'];
    modules.push('virtio_console', 'button', 'evdev', 'cdrom', 'scsi_mod', 'virtio_ring');
    expect(files).toEqual(expect.arrayContaining(modules.map((module) => `lib/modules/${module}.ko`)));

    appendFileSync(path.join(scratch, 'scripts/test-guest/init'), '# changed\n');
    const second = await build();
    expect(second).not.toBe(first);
    expect(path.basename(second).split('-').slice(0, -1)).toEqual(
      path.basename(first).split('-').slice(0, -1),
    );
  });
});

/**
 * Waits for a line of the guest's power button reader; when it does not come, the error also says
 * what the guest shows of it: its processes, its ACPI interrupts, what reads an input device.
 */
async function powerButtonLine(vm: TestQemu, line: string, from: number): Promise<void> {
  try {
    await vm.console.waitForLine(line, { from });
  } catch (err) {
    const diagnosis = 'ps; grep -i acpi /proc/interrupts; ls -l /proc/[0-9]*/fd/0 2>/dev/null | grep input';
    const seen = await Promise.race([
      vm.console.capture(diagnosis),
      new Promise<string[]>((resolve) => setTimeout(() => resolve(['(the console did not answer)']), 15_000)),
    ]);
    (err as Error).message += `\n--- the guest's side (${diagnosis}) ---\n${seen.join('\n')}`;
    throw err;
  }
}

describe('test guest under TCG', () => {
  let guest: TestGuest;
  let isoDir: string;
  let vm: TestQemu;
  let qmp: QmpClient;
  let agentPortOpened: Promise<QmpEvent>;

  beforeAll(async () => {
    guest = await ensureTestGuest();
    isoDir = mkdtempSync(path.join(os.tmpdir(), 'vmop-guest-cd-'));
    mkdirSync(path.join(isoDir, 'content'));
    writeFileSync(path.join(isoDir, 'content/hello.txt'), 'hello from vmop\n');
    const iso = path.join(isoDir, 'cd.iso');
    await run('genisoimage', ['-quiet', '-V', 'VMOPTEST', '-o', iso, path.join(isoDir, 'content')]);
    vm = await launchTestGuest(guest, {
      smp: '1,maxcpus=2',
      paused: true,
      args: [
        ...['-device', 'virtio-scsi-pci,id=scsi0'],
        ...['-drive', `if=none,id=cd0,media=cdrom,readonly=on,file=${iso}`],
        ...['-device', 'scsi-cd,id=cdrom0,drive=cd0,bus=scsi0.0'],
      ],
    });
    qmp = await QmpClient.connect(vm.qmpSocket);
    // Subscribed while qemu is still paused, so the event cannot be missed.
    agentPortOpened = qmp.waitForEvent('VSERPORT_CHANGE', {
      match: (data) => data.open === true,
      timeoutMs: BOOT_TIMEOUT_MS,
    });
    agentPortOpened.catch(() => undefined); // awaited by its test; a failed boot must not leave it unhandled
    await qmp.execute('cont');
  });
  afterAll(async () => {
    await qmp?.close();
    await vm?.stop();
    if (isoDir) rmSync(isoDir, { recursive: true, force: true });
  });

  it('prints the ready marker on the serial console, after saying where its power button is', async () => {
    await vm.console.waitForLine(TEST_GUEST_READY_MARKER, { timeoutMs: BOOT_TIMEOUT_MS });
    expect(vm.console.output).toMatch(/^vmop-guest: input device\(s\) of the power button:( event\d+)+$/m);
  });

  it('answers QMP: the VM is running', async () => {
    expect(await qmp.execute('query-status')).toMatchObject({ status: 'running', running: true });
  });

  it('opens the vmop agent port, so qemu reports VSERPORT_CHANGE open', async () => {
    expect((await agentPortOpened).data).toEqual({ id: 'vmopagent0', open: true });
  });

  it('gives a root shell on ttyS0 that comes back after exit', async () => {
    expect(await vm.console.run('[ "$(id -u)" = 0 ]')).toBe(0);
    const from = vm.console.output.length;
    vm.console.type('exit');
    await vm.console.waitForLine("Enter 'help' for a list of built-in commands.", { from });
    expect(await vm.console.run('true')).toBe(0);
  });

  it('runs the balloon driver: balloon gives BALLOON_CHANGE and query-balloon shows the size', async () => {
    const target = 160 * MiB;
    const changed = qmp.waitForEvent('BALLOON_CHANGE', { match: (data) => data.actual === target });
    await qmp.execute('balloon', { value: target });
    await changed;
    expect(await qmp.execute('query-balloon')).toEqual({ actual: target });
  });

  it('onlines a hot-plugged CPU', async () => {
    const slots = await qmp.execute<HotpluggableCpu[]>('query-hotpluggable-cpus');
    const free = slots.find((slot) => !slot['qom-path'])!;
    const from = vm.console.output.length;
    const reported = qmp.waitForEvent('ACPI_DEVICE_OST', { match: (data) => data.info?.device === 'cpu1' });
    await qmp.execute('device_add', { driver: free.type, id: 'cpu1', ...free.props });
    await reported;
    await vm.console.waitForLine('vmop-guest: cpu1 online', { from });
    expect(await vm.console.run('grep -qx 1 /sys/devices/system/cpu/cpu1/online')).toBe(0);
  });

  it('releases the CPU again on device_del', async () => {
    // qemu 7.2 under TCG sends no DEVICE_DELETED for the CPU itself (only for its lapic); the guest's
    // eject shows as ACPI_DEVICE_OST with source 3 (eject request) and status 0 (success).
    const ejected = qmp.waitForEvent('ACPI_DEVICE_OST', {
      match: (data) => data.info?.source === 3 && data.info?.status === 0,
    });
    await qmp.execute('device_del', { id: 'cpu1' });
    await ejected;
    const slots = await qmp.execute<HotpluggableCpu[]>('query-hotpluggable-cpus');
    expect(slots.filter((slot) => slot['qom-path'])).toHaveLength(1);
    expect(await qmp.execute<unknown[]>('query-cpus-fast')).toHaveLength(1);
    expect(await vm.console.run('[ ! -e /sys/devices/system/cpu/cpu1 ]')).toBe(0);
  });

  it('locks the CD tray while mounted and opens it on umount + eject', async () => {
    const cdrom = async () =>
      (await qmp.execute<BlockDevice[]>('query-block')).find((device) => device.qdev === 'cdrom0')!;
    expect(await vm.console.run('mount -r -t iso9660 /dev/sr0 /mnt')).toBe(0);
    expect(await vm.console.run('grep -qx "hello from vmop" /mnt/hello.txt')).toBe(0);
    expect(await cdrom()).toMatchObject({ locked: true, tray_open: false });

    const refused = qmp.execute('eject', { id: 'cdrom0' });
    await expect(refused).rejects.toBeInstanceOf(QmpError);
    await expect(refused).rejects.toThrow(/is locked/);

    const opened = qmp.waitForEvent('DEVICE_TRAY_MOVED', { match: (data) => data['tray-open'] === true });
    expect(await vm.console.run('umount /mnt && eject /dev/sr0')).toBe(0);
    expect((await opened).data).toMatchObject({ id: 'cdrom0', 'tray-open': true });
    expect(await cdrom()).toMatchObject({ locked: false, tray_open: true });
  });

  it('ignores the power button while /run/vmop-ignore-powerbutton exists', async () => {
    expect(await vm.console.run('touch /run/vmop-ignore-powerbutton')).toBe(0);
    const from = vm.console.output.length;
    try {
      await qmp.execute('system_powerdown');
      await powerButtonLine(vm, 'vmop-guest: power button ignored', from);
      expect(await qmp.execute('query-status')).toMatchObject({ status: 'running' });
    } finally {
      // Whatever happened, the next test finds a guest that heeds the button.
      expect(await vm.console.run('rm /run/vmop-ignore-powerbutton')).toBe(0);
    }
  });

  it('powers off on system_powerdown: SHUTDOWN by the guest, and qemu exits', async () => {
    const shutdown = qmp.waitForEvent('SHUTDOWN');
    await qmp.execute('system_powerdown');
    expect((await shutdown).data).toEqual({ guest: true, reason: 'guest-shutdown' });
    expect(await vm.exited).toEqual({ code: 0, signal: null });
  });
});

describe('test guest with vmop.powerbutton=ignore on the kernel command line', () => {
  let vm: TestQemu;
  let qmp: QmpClient;
  beforeAll(async () => {
    vm = await launchTestGuest(await ensureTestGuest(), { cmdline: ['vmop.powerbutton=ignore'] });
    qmp = await QmpClient.connect(vm.qmpSocket);
  });
  afterAll(async () => {
    await qmp?.close();
    await vm?.stop();
  });

  it('ignores system_powerdown and keeps running', async () => {
    await vm.console.waitForLine(TEST_GUEST_READY_MARKER, { timeoutMs: BOOT_TIMEOUT_MS });
    const from = vm.console.output.length;
    await qmp.execute('system_powerdown');
    await powerButtonLine(vm, 'vmop-guest: power button ignored', from);
    expect(await qmp.execute('query-status')).toMatchObject({ status: 'running' });
  });
});
