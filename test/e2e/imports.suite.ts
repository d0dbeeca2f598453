// Disks filled from images (issue 25 §1), on `vmop dev`'s real node with its image web server: a
// VM boots from a disk imported over HTTP (qcow2, and raw compressed with xz) and from a registry
// image (KubeVirt's containerDisk layout), from a copy of another VM's disk and from a VirtualMachineImage
// imported once for many disks (no second download); every bad source
// gives its message in the VM's status, and no runner pod is made for a disk that is not whole;
// an importer killed mid-way is replaced and the import starts over.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { VMOP_BIN } from '../../src/devenv/dev-environment.js';
import { downloadsIn } from '../../src/devenv/image-server.js';
import { useDevBed } from '../support/beds.js';
import { nodeProcesses, signalRecorded } from '../support/qemu-process.js';
import { eventually } from '../support/eventually.js';
import { testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';

const run = promisify(execFile);
const NAMESPACE = 'imports';
/** A namespace where no VM was ever made (so nothing made the runners' ServiceAccount there). */
const IMAGES_ONLY = 'imports-images-only';
const READY = 'VMOP-GUEST-READY';

interface DiskStatus {
  name: string;
  claim: string;
  capacity?: string;
  phase: string;
  progress?: string;
  importedBytes?: number;
  message?: string;
}

const sha256Of = async (file: string) =>
  createHash('sha256')
    .update(await readFile(file))
    .digest('hex');

describe('disks: imported from images', () => {
  let vms: ClusterVms;
  let images: { url: string; dir: string; testGuestDisk: string; downloads: (name: string) => number };
  let registry: { testGuestImage: string; noDiskImage: string };
  let guestSha256: string;
  /** Downloads of the test guest's disk before this file's tests (the bed is shared). */
  let earlierDownloads = 0;
  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE, IMAGES_ONLY] });
  beforeAll(async () => {
    vms = bed.vms(NAMESPACE);
    const { imageServer, imageRegistry } = bed.state();
    images = { ...imageServer, downloads: (name) => downloadsIn(imageServer.accessLog, name) };
    registry = imageRegistry;
    guestSha256 = await sha256Of(images.testGuestDisk);
    earlierDownloads = images.downloads('test-guest.qcow2');
  });

  /** The VirtualMachineImage `guest` (the test guest's disk) in `namespace`, once it is Ready. */
  async function importGuestImage(where: ClusterVms, namespace: string) {
    await where.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineImage
metadata: {name: guest, namespace: ${namespace}}
spec:
  source: {http: {url: "${images.url}/test-guest.qcow2", sha256: "${guestSha256}"}}
  storage: {size: 64Mi}
`);
    return eventually(async () => {
      const got = JSON.parse(await where.kubectl(['get', 'vmimage', 'guest', '-o', 'json'])) as {
        status?: { phase?: string; claim?: string; size?: string; message?: string };
      };
      expect(got.status?.phase).toBe('Ready');
      return got;
    }, 180_000);
  }

  /** A test guest VM whose one disk (bootable, bootindex 0) is imported from `source`. */
  const applyVm = (name: string, source: object, size = '64Mi') =>
    vms.apply(
      testGuestManifest(name, NAMESPACE).replace(
        '    networks: []\n',
        `    networks: []
    disks:
    - volumeClaimTemplate:
        metadata: {name: system}
        spec:
          resources: {requests: {storage: ${size}}}
      bootindex: 0
      source: ${JSON.stringify(source)}
`,
      ),
    );
  const disksOf = (vm: Vm) => (vm.status as { disks?: DiskStatus[] } | undefined)?.disks;
  const pods = async (name: string) =>
    (await vms.kubectl(['get', 'pods', '-l', `app.kubernetes.io/instance=${name}`, '-o', 'name']))
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((pod) => pod.replace(/^pod\//, ''));
  const claim = async (name: string) =>
    JSON.parse(await vms.kubectl(['get', 'pvc', name, '-o', 'json'])) as {
      metadata: { annotations?: Record<string, string> };
    };
  /** What the guest's kernel was started with: SYSLINUX (the disk's boot loader) adds BOOT_IMAGE. */
  async function bootedFromDisk(name: string): Promise<void> {
    await vms.typeOnConsole(name, 'echo cmdline-$(cat /proc/cmdline)-end');
    await eventually(
      async () =>
        expect(await vms.consoleLog(name)).toContain(
          'cmdline-BOOT_IMAGE=vmlinuz console=ttyS0 quiet no_timer_check initrd=initrd.img-end',
        ),
      30_000,
    );
  }

  it('a VM boots from a disk imported over HTTP from a qcow2 image, after waiting in Pending for it', async () => {
    await applyVm('from-qcow2', { http: { url: `${images.url}/test-guest.qcow2`, sha256: guestSha256 } });
    const waiting = await vms.waitForVm('from-qcow2', (vm) => {
      expect(vm.status?.phase).toBe('Pending');
      expect(vms.condition(vm, 'Running')?.reason).toBe('ImportingDisks');
      expect(disksOf(vm)?.[0]).toMatchObject({ name: 'system-disk', phase: 'Importing' });
    });
    expect(vms.condition(waiting, 'Running')?.message).toBe('waiting for disks to be imported: system-disk');
    const booted = await vms.waitForVm('from-qcow2', (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(disksOf(vm)).toEqual([
        { name: 'system-disk', claim: 'from-qcow2-system-disk', capacity: '64Mi', phase: 'Ready' },
      ]);
    });
    expect(booted.status?.runnerPod?.name).toBe('from-qcow2');
    await vms.waitForConsole('from-qcow2', READY);
    await bootedFromDisk('from-qcow2');
    // The claim says what it holds; the importer pod is gone; Events tell the story.
    expect(Object.keys((await claim('from-qcow2-system-disk')).metadata.annotations ?? {})).toContain(
      'vmoperator.jdrupes.org/imported',
    );
    expect(await pods('from-qcow2')).toEqual(['from-qcow2']);
    const events = await vms.eventMessages('from-qcow2');
    expect(events).toContain(
      `ImportStarted: disk system-disk: importing ${images.url}/test-guest.qcow2 into claim from-qcow2-system-disk`,
    );
    expect(events).toContain(`Imported: disk system-disk: imported qcow2 image (sha256 ${guestSha256})`);
    await vms.kubectl(['delete', 'vm', 'from-qcow2', '--wait=false']);
  });

  it('another disk copied from that one: the VM boots, and the image is not downloaded again', async () => {
    const downloads = images.downloads('test-guest.qcow2');
    expect(downloads).toBe(earlierDownloads + 1);
    await applyVm('cloned', { pvc: { name: 'from-qcow2-system-disk' } });
    await vms.waitForVm('cloned', (vm) => expect(vm.status?.phase).toBe('Running'));
    await vms.waitForConsole('cloned', READY);
    await bootedFromDisk('cloned');
    expect(await vms.eventMessages('cloned')).toContain(
      'Imported: disk system-disk: imported raw image (a copy of claim from-qcow2-system-disk)',
    );
    expect(images.downloads('test-guest.qcow2')).toBe(downloads);
    await vms.kubectl(['delete', 'vm', 'cloned', '--wait=false']);
  });

  it('a VirtualMachineImage is imported once; disks of two VMs are filled from it without another download', async () => {
    const downloads = images.downloads('test-guest.qcow2');
    // A VM naming an image that does not exist yet waits for it.
    await applyVm('from-image-a', { image: { name: 'guest' } });
    await vms.waitForVm('from-image-a', (vm) => {
      expect(vm.status?.phase).toBe('Pending');
      expect(disksOf(vm)?.[0]).toMatchObject({
        phase: 'Importing',
        message: 'waiting for image guest, which does not exist',
      });
    });
    const image = await importGuestImage(vms, NAMESPACE);
    expect(image.status).toMatchObject({ phase: 'Ready', claim: 'guest-image', size: '64Mi' });
    expect(image.status?.message).toBe('imported into claim guest-image');
    await applyVm('from-image-b', { image: { name: 'guest' } });
    for (const name of ['from-image-a', 'from-image-b']) {
      await vms.waitForVm(name, (vm) => expect(vm.status?.phase).toBe('Running'));
      await vms.waitForConsole(name, READY);
      await bootedFromDisk(name);
      expect(await vms.eventMessages(name)).toContain(
        `Imported: disk system-disk: imported raw image (a copy of claim guest-image)`,
      );
    }
    expect(images.downloads('test-guest.qcow2')).toBe(downloads + 1);
    const imageEvents = JSON.parse(
      await vms.kubectl(['get', 'events', '--field-selector', 'involvedObject.name=guest', '-o', 'json']),
    ) as { items: Array<{ reason: string; message: string }> };
    expect(imageEvents.items.map((event) => `${event.reason}: ${event.message}`)).toContain(
      `Imported: imported qcow2 image (sha256 ${guestSha256})`,
    );
    // Another image is another object: its spec does not change.
    await expect(
      vms.kubectl([
        'patch',
        'vmimage',
        'guest',
        '--type',
        'merge',
        '-p',
        '{"spec":{"storage":{"size":"128Mi"}}}',
      ]),
    ).rejects.toThrow(/the spec of an image is immutable/);
    await vms.kubectl(['delete', 'vm', 'from-image-a', 'from-image-b', '--wait=false']);
  });

  it('`vmop image upload` sends the test guest through the apiserver into a new VirtualMachineImage, checked by its SHA-256, and a VM boots from it', async () => {
    const upload = (...args: string[]) =>
      run(
        VMOP_BIN,
        ['image', 'upload', images.testGuestDisk, '--name', 'uploaded', '-n', NAMESPACE, ...args],
        {
          env: bed.env(),
        },
      );
    const sent = await upload();
    expect(sent.stderr).toMatch(/^virtualmachineimage\/uploaded created in imports \(\d+Mi\)$/m);
    expect(sent.stderr).toContain(`sha256 ${guestSha256}`);
    expect(sent.stdout.trim()).toBe(
      `virtualmachineimage/uploaded Ready (imported into claim uploaded-image)`,
    );
    const events = JSON.parse(
      await vms.kubectl(['get', 'events', '--field-selector', 'involvedObject.name=uploaded', '-o', 'json']),
    ) as { items: Array<{ reason: string; message: string }> };
    expect(events.items.map((event) => `${event.reason}: ${event.message}`)).toContain(
      `Imported: imported qcow2 image (sha256 ${guestSha256})`,
    );
    // Its token goes with the import; sending again says it is there.
    await eventually(
      async () =>
        expect(await vms.kubectl(['get', 'secrets', '-o', 'name'])).not.toContain('secret/uploaded-upload'),
      30_000,
    );
    expect((await upload()).stderr).toContain('uploaded is already Ready');
    await applyVm('from-upload', { image: { name: 'uploaded' } });
    await vms.waitForVm('from-upload', (vm) => expect(vm.status?.phase).toBe('Running'));
    await vms.waitForConsole('from-upload', READY);
    await bootedFromDisk('from-upload');
    await vms.kubectl(['delete', 'vm', 'from-upload', '--wait=false']);
  });

  it('a raw image compressed with xz streams onto the disk, and the VM boots from it', async () => {
    const raw = path.join(images.dir, 'test-guest.raw');
    await run('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', images.testGuestDisk, raw]);
    await run('xz', ['-T1', '-1', '-f', raw]);
    await applyVm('from-xz', { http: { url: `${images.url}/test-guest.raw.xz` } });
    await vms.waitForVm('from-xz', (vm) => expect(vm.status?.phase).toBe('Running'));
    await vms.waitForConsole('from-xz', READY);
    await bootedFromDisk('from-xz');
    expect(await vms.eventMessages('from-xz')).toContain(
      'Imported: disk system-disk: imported raw image (no sha256 given to check)',
    );
    await vms.kubectl(['delete', 'vm', 'from-xz', '--wait=false']);
  });

  it('a VM boots from a disk pulled from a registry image (a containerDisk: the qcow2 under /disk/)', async () => {
    await applyVm('from-registry', { registry: { image: registry.testGuestImage, insecure: true } });
    await vms.waitForVm('from-registry', (vm) => expect(vm.status?.phase).toBe('Running'));
    await vms.waitForConsole('from-registry', READY);
    await bootedFromDisk('from-registry');
    expect(await vms.eventMessages('from-registry')).toContainEqual(
      expect.stringMatching(
        new RegExp(
          `^Imported: disk system-disk: imported qcow2 image \\(${registry.testGuestImage}, layer sha256:[0-9a-f]{64}\\)$`,
        ),
      ),
    );
    await vms.kubectl(['delete', 'vm', 'from-registry', '--wait=false']);
  });

  it('each bad source fails with its message; no runner pod is made; a corrected source imports and boots', async () => {
    await writeFile(
      path.join(images.dir, 'download.html'),
      '<!DOCTYPE html>\n<html><body>Download</body></html>\n',
    );
    const wrongSha = '0'.repeat(64);
    const bad: Array<[string, object, string, string]> = [
      [
        'bad-checksum',
        { http: { url: `${images.url}/test-guest.qcow2`, sha256: wrongSha } },
        'ChecksumMismatch',
        `the SHA-256 of ${images.url}/test-guest.qcow2 is ${guestSha256}, the disk's source says ${wrongSha}`,
      ],
      [
        'bad-format',
        { http: { url: `${images.url}/download.html` } },
        'UnknownFormat',
        `${images.url}/download.html holds an HTML page, not a disk image vmop imports (raw or qcow2, either one plain or compressed with xz or gzip)`,
      ],
      [
        'bad-no-disk',
        { registry: { image: registry.noDiskImage, insecure: true } },
        'NoDisk',
        `${registry.noDiskImage} holds no disk: no file under /disk/ in any of its layers`,
      ],
      [
        'bad-missing',
        { http: { url: `${images.url}/no-such-image.qcow2` } },
        'HttpError',
        `${images.url}/no-such-image.qcow2 answered HTTP 404 Not Found`,
      ],
    ];
    for (const [name, source] of bad) await applyVm(name, source);
    await applyVm('bad-size', { http: { url: `${images.url}/test-guest.qcow2` } }, '16Mi');
    // Nothing listens on port 2: refused five times (waits 1+2+4+8 s), then it fails.
    const unreachable = images.url.replace(/:\d+$/, ':2');
    await applyVm('bad-host', { http: { url: `${unreachable}/test-guest.qcow2` } });

    for (const [name, , reason, message] of bad) {
      const vm = await vms.waitForVm(name, (vm) => expect(disksOf(vm)?.[0]?.phase).toBe('Failed'), 120_000);
      expect(disksOf(vm)?.[0]?.message).toBe(`${reason}: ${message}`);
      expect(vm.status?.phase).toBe('Pending');
      expect(vms.condition(vm, 'Running')).toMatchObject({
        reason: 'DiskImportFailed',
        message: `importing a disk failed: system-disk: ${message}`,
      });
      expect(vm.status?.runnerPod).toBeUndefined();
      expect(await vms.eventMessages(name)).toContain(`ImportFailed: disk system-disk: ${message}`);
      expect(Object.keys((await claim(`${name}-system-disk`)).metadata.annotations ?? {})).not.toContain(
        'vmoperator.jdrupes.org/imported',
      );
    }
    const tooSmall = await vms.waitForVm(
      'bad-size',
      (vm) => expect(disksOf(vm)?.[0]?.phase).toBe('Failed'),
      120_000,
    );
    expect(disksOf(tooSmall)?.[0]?.message).toMatch(
      /^TooLarge: the image is larger than the disk: its virtual size is \d+ bytes, its claim holds 16777216$/,
    );
    const refused = await vms.waitForVm(
      'bad-host',
      (vm) => expect(disksOf(vm)?.[0]?.phase).toBe('Failed'),
      120_000,
    );
    expect(disksOf(refused)?.[0]?.message).toMatch(
      new RegExp(
        `^Unreachable: could not download ${unreachable}/test-guest.qcow2 \\(5 attempts\\): fetch failed`,
      ),
    );
    for (const name of ['bad-size', 'bad-host'])
      expect((await vms.getVm(name)).status?.runnerPod).toBeUndefined();

    // The right checksum: the import starts over and the VM boots.
    await applyVm('bad-checksum', { http: { url: `${images.url}/test-guest.qcow2`, sha256: guestSha256 } });
    await vms.waitForVm('bad-checksum', (vm) => expect(vm.status?.phase).toBe('Running'));
    await vms.waitForConsole('bad-checksum', READY);
    for (const [name] of [...bad, ['bad-size'], ['bad-host']])
      await vms.kubectl(['delete', 'vm', name!, '--wait=false']);
    // Its waits add up past the suite's 300 s on a slow machine (CI's took 2.5× this one's time).
  }, 600_000);

  it('an importer killed mid-way is replaced, the import starts over, and the VM boots only once it is whole', async () => {
    // About 12 s for the whole image: time to look at the progress and to kill the pod.
    await applyVm('killed', {
      http: { url: `${images.url}/test-guest.qcow2?bytesPerSecond=2000000`, sha256: guestSha256 },
    });
    const importer = 'killed-import-system-disk';
    const under = await vms.waitForVm('killed', (vm) => {
      const disk = disksOf(vm)?.[0];
      expect(disk?.phase).toBe('Importing');
      expect(disk?.importedBytes).toBeGreaterThan(0);
      expect(disk?.progress).toMatch(/^\d+%$/);
    });
    expect(parseInt(disksOf(under)![0]!.progress!, 10)).toBeLessThan(100);
    const uidOf = async () =>
      (await vms.kubectl(['get', 'pod', importer, '-o', 'jsonpath={.metadata.uid}']).catch(() => '')).trim();
    const first = await uidOf();
    // It runs as a user of no account (Pod Security restricted), not as root. Found on this bed's
    // nodes (beds run side by side: never machine-wide).
    const importers = (
      await Promise.all(
        bed
          .state()
          .nodeServices.map(({ cgroupRoot }) =>
            nodeProcesses(cgroupRoot, (argv) => /\0import\0--url\0http:\/\/[^\0]+bytesPerSecond=/.test(argv)),
          ),
      )
    ).flat();
    expect(importers).toHaveLength(1);
    const status = await readFile(`/proc/${importers[0]!.pid}/status`, 'utf8');
    expect(/^Uid:\s+(\d+)/m.exec(status)?.[1]).toBe('65532');
    // Killed as the kernel's OOM killer would: no outcome written, the pod just fails.
    signalRecorded(importers[0]!);
    await eventually(async () => {
      const second = await uidOf();
      expect(second).not.toBe('');
      expect(second).not.toBe(first);
    }, 60_000);
    expect((await vms.getVm('killed')).status?.runnerPod).toBeUndefined();
    await vms.waitForVm('killed', (vm) => expect(vm.status?.phase).toBe('Running'));
    await vms.waitForConsole('killed', READY);
    await bootedFromDisk('killed');
    await vms.kubectl(['delete', 'vm', 'killed', '--wait=false']);
  });

  it("imports from the cluster's own endpoints (the apiserver, a node, cloud metadata) are refused, saying why", async () => {
    const apiserver = /server: (https:\/\/\S+)/.exec(await readFile(bed.kubeconfig, 'utf8'))![1]!;
    const apiserverHost = new URL(apiserver).host;
    const node = (
      await vms.kubectl([
        'get',
        'nodes',
        '-o',
        'jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}',
      ])
    ).trim();
    const refused: Array<[string, string, string]> = [
      [
        'to-metadata',
        'http://169.254.169.254/latest/meta-data/',
        "imports may not fetch from 169.254.169.254 (169.254.169.254 is in 169.254.0.0/16, which the cluster's admin has not allowed)",
      ],
      [
        'to-apiserver',
        `${apiserver}/api/v1/secrets`,
        `imports may not fetch from ${apiserverHost} (${apiserverHost.replace(/:\d+$/, '')} is in ${apiserverHost}, which the cluster's admin has not allowed)`,
      ],
      [
        'to-node',
        `http://${node}:10250/pods`,
        `imports may not fetch from ${node}:10250 (${node} is in ${node}, which the cluster's admin has not allowed)`,
      ],
    ];
    for (const [name, url] of refused) await applyVm(name, { http: { url } });
    for (const [name, , message] of refused) {
      const vm = await vms.waitForVm(name, (vm) => expect(disksOf(vm)?.[0]?.phase).toBe('Failed'), 120_000);
      expect(disksOf(vm)?.[0]?.message).toBe(`Forbidden: ${message}`);
      expect(vm.status?.runnerPod).toBeUndefined();
    }
    await vms.kubectl(['delete', 'vm', ...refused.map(([name]) => name), '--wait=false']);
  });

  it('a VirtualMachineImage in a namespace without VMs, enforcing Pod Security restricted, imports: vmop makes what its importer pod needs first', async () => {
    const alone = bed.vms(IMAGES_ONLY);
    expect(await alone.kubectl(['get', 'serviceaccounts', '-o', 'name'])).not.toContain('vm-runner');
    // The apiserver admits the importer pod under Pod Security "restricted" (no VM's pod runs here).
    await alone.kubectl(['label', 'namespace', IMAGES_ONLY, 'pod-security.kubernetes.io/enforce=restricted']);
    const image = await importGuestImage(alone, IMAGES_ONLY);
    expect(image.status).toMatchObject({ phase: 'Ready', message: 'imported into claim guest-image' });
    const account = JSON.parse(await alone.kubectl(['get', 'serviceaccount', 'vm-runner', '-o', 'json']));
    expect(account.automountServiceAccountToken).toBe(false);
  });
});
