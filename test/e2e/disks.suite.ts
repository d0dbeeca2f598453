// Disks as users bring them (issue 25), on `vmop dev`'s real node: a disk grows while the VM runs
// and the running guest sees it; a shrink, or a StorageClass that does not allow expansion, is
// refused with a message and changes nothing. A disk added to a running VM's spec appears in the
// guest, one removed goes, without a restart; both outlive a restart of the managers and the VM.
import { beforeAll, describe, expect, it } from 'vitest';
import { attachPodName } from '../../src/reconcilers/virtual-machine/disks/attach-pod.js';
import { useDevBed } from '../support/beds.js';
import { eventually } from '../support/eventually.js';
import { testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';
import { signalRecorded } from '../support/qemu-process.js';

const NAMESPACE = 'disks';
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
  attachment?: { phase: string; reason: string; message?: string };
}

describe('disks: resize while running', () => {
  let vms: ClusterVms;
  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE] });
  beforeAll(() => {
    vms = bed.vms(NAMESPACE);
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

  describe('attach and detach while running', () => {
    const VM = 'attach';
    const TAG = 'vmop-attached-data';
    /** A JSON patch of the VM's disk list. */
    const patchDisks = (operation: object) =>
      vms.kubectl(['patch', 'vm', VM, '--type', 'json', '-p', JSON.stringify([operation])]);
    const addDisk = (name: string, size: string) =>
      patchDisks({
        op: 'add',
        path: '/spec/vm/disks/-',
        value: {
          volumeClaimTemplate: { metadata: { name }, spec: { resources: { requests: { storage: size } } } },
        },
      });
    const removeDisk = (index: number) => patchDisks({ op: 'remove', path: `/spec/vm/disks/${index}` });
    let listed = 0;
    /** The guest's disks as its kernel has them now: name=bytes, sorted. */
    async function guestDisks(): Promise<string[]> {
      const tag = `disks-${++listed}`;
      await vms.typeOnConsole(
        VM,
        `echo ${tag}-$(for d in /sys/block/[sv]d*; do [ -e $d ] && echo -n "$(basename $d)=$(( $(cat $d/size) * 512 )),"; done)`,
      );
      let disks: string[] = [];
      await eventually(async () => {
        const match = new RegExp(`\\n${tag}-([^\\r]*)\\r`).exec(await vms.consoleLog(VM));
        expect(match).not.toBeNull();
        disks = match![1]!.split(',').filter(Boolean).sort();
      }, 30_000);
      return disks;
    }
    const podExists = async (name: string) =>
      vms.kubectl(['get', 'pod', name]).then(
        () => true,
        (err: Error) => (/NotFound/.test(err.message) ? false : Promise.reject(err)),
      );

    it('a disk added to the spec of a running VM appears in the guest, without a restart', async () => {
      await applyVm(VM, '16Mi');
      const before = await vms.waitForVm(VM, (vm) => {
        expect(vm.status?.phase).toBe('Running');
        expect(vms.condition(vm, 'Booted')?.status).toBe('True');
      });
      await vms.waitForConsole(VM, READY);
      expect(await guestDisks()).toEqual([`vda=${16 * MiB}`]);

      await addDisk('extra', '24Mi');
      const attached = await vms.waitForVm(VM, (vm) => {
        expect(disksOf(vm)).toEqual([
          { name: 'data-disk', claim: 'attach-data-disk', capacity: '16Mi', phase: 'Ready' },
          {
            name: 'extra-disk',
            claim: 'attach-extra-disk',
            capacity: '24Mi',
            phase: 'Ready',
            attachment: {
              phase: 'Attached',
              reason: 'Attached',
              message: `attached over NBD from pod ${attachPodName(VM, 'extra-disk')}`,
            },
          },
        ]);
      });
      await eventually(
        async () => expect(await guestDisks()).toEqual([`sda=${24 * MiB}`, `vda=${16 * MiB}`]),
        30_000,
      );
      await vms.typeOnConsole(VM, `echo ${TAG} | dd of=/dev/sda conv=fsync`);
      // The same runner and QEMU; nothing waits for a restart; the VM stays put until restarted.
      expect(attached.status?.runner?.runId).toBe(before.status?.runner?.runId);
      expect(vms.condition(attached, 'AwaitingRestartToApplyConfiguration')?.status).toBe('False');
      expect(vms.condition(attached, 'Migratable')).toMatchObject({
        status: 'False',
        reason: 'DisksAttachedAtRuntime',
      });
      expect(await vms.eventMessages(VM)).toContain(
        'DiskAttached: disk extra-disk: attached to the running VM',
      );
    });

    it('attachments outlive a restart of the managers; a disk removed from the spec leaves the guest', async () => {
      const { runId } = (await vms.getVm(VM)).status!.runner!;
      const killed = bed.state().managers;
      for (const manager of killed) signalRecorded(manager);
      await eventually(() => {
        expect(bed.state().managers.map((m) => m.restarts)).toEqual(killed.map((m) => m.restarts + 1));
      }, 60_000);
      // The new managers take over what is attached, detaching nothing.
      await vms.waitForVm(VM, (vm) => expect(disksOf(vm)?.[1]?.attachment?.phase).toBe('Attached'));
      expect(await guestDisks()).toEqual([`sda=${24 * MiB}`, `vda=${16 * MiB}`]);

      await removeDisk(1);
      await vms.waitForVm(
        VM,
        (vm) => expect(disksOf(vm)?.map((disk) => disk.name)).toEqual(['data-disk']),
        60_000,
      );
      await eventually(async () => expect(await guestDisks()).toEqual([`vda=${16 * MiB}`]), 30_000);
      await eventually(
        async () => expect(await podExists(attachPodName(VM, 'extra-disk'))).toBe(false),
        60_000,
      );
      expect(await vms.eventMessages(VM)).toContain(
        'DiskDetached: disk extra-disk: detached from the running VM',
      );
      const after = await vms.getVm(VM);
      expect(after.status?.runner?.runId).toBe(runId);
      expect(vms.condition(after, 'Migratable')?.reason).not.toBe('DisksAttachedAtRuntime');
      // The claim and its data stay: attached again, the guest reads what it wrote.
      await addDisk('extra', '24Mi');
      await vms.waitForVm(VM, (vm) => expect(disksOf(vm)?.[1]?.attachment?.phase).toBe('Attached'));
      await vms.typeOnConsole(VM, `echo read-$(head -c ${TAG.length} /dev/sda)`);
      await vms.waitForConsole(VM, `read-${TAG}`, 30_000);
    });

    it("a disk the VM started with stays until its restart; after it every disk is the pod's own", async () => {
      await removeDisk(0);
      const kept = await vms.waitForVm(
        VM,
        (vm) => {
          expect(disksOf(vm)?.find((disk) => disk.name === 'data-disk')?.attachment).toMatchObject({
            phase: 'Attached',
            reason: 'DetachAtRestart',
          });
          expect(vms.condition(vm, 'AwaitingRestartToApplyConfiguration')?.status).toBe('True');
        },
        60_000,
      );
      expect(await guestDisks()).toEqual([`sda=${24 * MiB}`, `vda=${16 * MiB}`]);

      await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineOperation
metadata: {name: attach-restart, namespace: ${NAMESPACE}}
spec: {virtualMachineName: ${VM}, type: Restart}
`);
      const restarted = await vms.waitForVm(VM, (vm) => {
        expect(vm.status?.runner?.runId).not.toBe(kept.status?.runner?.runId);
        expect(vms.condition(vm, 'Booted')?.status).toBe('True');
        expect(disksOf(vm)).toEqual([
          { name: 'extra-disk', claim: 'attach-extra-disk', capacity: '24Mi', phase: 'Ready' },
        ]);
      });
      await vms.waitForConsole(VM, READY);
      // The attached disk is the only one now, a disk of the pod (virtio), with what the guest wrote.
      expect(await guestDisks()).toEqual([`vda=${24 * MiB}`]);
      await vms.typeOnConsole(VM, `echo again-$(head -c ${TAG.length} /dev/vda)`);
      await vms.waitForConsole(VM, `again-${TAG}`, 30_000);
      expect(await podExists(attachPodName(VM, 'extra-disk'))).toBe(false);
      expect(vms.condition(restarted, 'AwaitingRestartToApplyConfiguration')?.status).toBe('False');
      await vms.kubectl(['delete', 'vm', VM, '--wait=false']);
    });
  });
});
