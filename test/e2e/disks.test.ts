// Disks as users bring them (issue 25), on `vmop dev`'s real node: a disk grows while the VM runs
// and the running guest sees it; a shrink, or a StorageClass that does not allow expansion, is
// refused with a message and changes nothing.
import { beforeAll, describe, expect, it } from 'vitest';
import { devBed } from '../support/dev-bed.js';
import { eventually } from '../support/eventually.js';
import { testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';

const NAMESPACE = 'default';
const READY = 'VMOP-GUEST-READY';
const MiB = 1024 * 1024;

/** The disk's spec, `size` on the node-local (default) class. */
const disk = (size: string) => `    disks:
    - volumeClaimTemplate:
        metadata: {name: data}
        spec:
          resources: {requests: {storage: ${size}}}
`;

interface DiskStatus {
  name: string;
  claim: string;
  capacity?: string;
  phase: string;
}

describe('disks: resize while running', () => {
  let vms: ClusterVms;
  const bed = devBed('disks', NAMESPACE);
  beforeAll(() => {
    ({ vms } = bed);
  });

  const applyVm = (name: string, size: string) =>
    vms.apply(
      testGuestManifest(name, NAMESPACE).replace('    networks: []\n', `    networks: []\n${disk(size)}`),
    );
  /** Sets the disk's size in the VM's spec (a JSON patch of the one disk). */
  const resize = (name: string, size: string) =>
    vms.kubectl([
      'patch',
      'vm',
      name,
      '--type',
      'json',
      '-p',
      JSON.stringify([
        {
          op: 'replace',
          path: '/spec/vm/disks/0/volumeClaimTemplate/spec/resources/requests/storage',
          value: size,
        },
      ]),
    ]);
  const claimSize = async (claim: string) =>
    JSON.parse(await vms.kubectl(['get', 'pvc', claim, '-o', 'json'])) as {
      spec: { resources: { requests: { storage: string } } };
      status: { capacity?: { storage: string } };
    };
  let asked = 0;
  /** The size of /dev/vda as the guest's kernel has it now, in bytes. */
  async function guestDiskBytes(name: string): Promise<number> {
    const tag = `vda-size-${++asked}`;
    await vms.typeOnConsole(name, `echo ${tag}-$(cat /sys/block/vda/size)`);
    let sectors = NaN;
    await eventually(async () => {
      const match = new RegExp(`\\n${tag}-(\\d+)\\r`).exec(await vms.consoleLog(name));
      expect(match).not.toBeNull();
      sectors = Number(match![1]);
    }, 30_000);
    return sectors * 512;
  }
  const disksOf = (vm: Vm) => (vm.status as { disks?: DiskStatus[] } | undefined)?.disks;

  it('a disk raised in the spec grows while the VM runs, and the running guest sees it', async () => {
    await applyVm('grows', '16Mi');
    const before = await vms.waitForVm('grows', (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
      expect(disksOf(vm)).toEqual([
        { name: 'data-disk', claim: 'grows-data-disk', capacity: '16Mi', phase: 'Ready' },
      ]);
    });
    await vms.waitForConsole('grows', READY);
    expect(await guestDiskBytes('grows')).toBe(16 * MiB);

    await resize('grows', '48Mi');
    const after = await vms.waitForVm(
      'grows',
      (vm) => {
        expect(disksOf(vm)).toEqual([
          { name: 'data-disk', claim: 'grows-data-disk', capacity: '48Mi', phase: 'Ready' },
        ]);
        expect(vms.condition(vm, 'Resized')).toMatchObject({ status: 'True' });
      },
      60_000,
    );
    expect((await claimSize('grows-data-disk')).status.capacity?.storage).toBe('48Mi');
    await eventually(async () => expect(await guestDiskBytes('grows')).toBe(48 * MiB), 30_000);
    // The same runner and QEMU: no restart.
    expect(after.status?.runner?.runId).toBe(before.status?.runner?.runId);
    expect(vms.condition(after, 'AwaitingRestartToApplyConfiguration')?.status).toBe('False');
  });

  it('a shrink is refused with a message; the claim and the guest keep their size', async () => {
    await resize('grows', '8Mi');
    const refused = await vms.waitForVm('grows', (vm) =>
      expect(vms.condition(vm, 'Resized')).toMatchObject({ status: 'False', reason: 'ShrinkRefused' }),
    );
    expect(vms.condition(refused, 'Resized')?.message).toBe(
      'disk data-disk: 8Mi is less than the 48Mi of its claim grows-data-disk; a disk cannot shrink',
    );
    expect((await claimSize('grows-data-disk')).spec.resources.requests.storage).toBe('48Mi');
    expect(await guestDiskBytes('grows')).toBe(48 * MiB);
    expect(vms.condition(refused, 'Running')?.status).toBe('True');
    await resize('grows', '48Mi');
    await vms.waitForVm('grows', (vm) => expect(vms.condition(vm, 'Resized')?.status).toBe('True'));
  });

  it('a StorageClass that does not allow expansion: refused with a message; once it does, the disk grows', async () => {
    const expansion = (allowed: boolean) =>
      vms.kubectl([
        'patch',
        'storageclass',
        'local',
        '-p',
        JSON.stringify({ allowVolumeExpansion: allowed }),
      ]);
    await expansion(false);
    try {
      await resize('grows', '64Mi');
      const refused = await vms.waitForVm('grows', (vm) =>
        expect(vms.condition(vm, 'Resized')).toMatchObject({
          status: 'False',
          reason: 'ExpansionNotAllowed',
        }),
      );
      expect(vms.condition(refused, 'Resized')?.message).toBe(
        'disk data-disk: its claim grows-data-disk cannot grow to 64Mi: StorageClass local does not allow volume expansion',
      );
      expect((await claimSize('grows-data-disk')).spec.resources.requests.storage).toBe('48Mi');
    } finally {
      await expansion(true);
    }
    // The class's change concerns the VMs with claims of it: the disk grows without another edit.
    await vms.waitForVm('grows', (vm) => expect(vms.condition(vm, 'Resized')?.status).toBe('True'), 30_000);
    await eventually(async () => expect(await guestDiskBytes('grows')).toBe(64 * MiB), 30_000);
    await vms.kubectl(['delete', 'vm', 'grows', '--wait=false']);
  });
});
