// VM snapshots on `vmop dev`'s real node (issue 54), storage without CSI snapshots (local-path):
// a stopped VM's snapshot copies its disk and runner data into claims of its own, holding the VM's
// start meanwhile; a running VM's is copied by its own QEMU at one instant, the guest frozen through
// its agent; the copies hold what the VM wrote, a clone is a new VM filled from them, and a restore
// writes them back.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { SnapshotStatus } from '../../src/api/virtual-machine-snapshot.js';
import { useDevBed } from '../support/beds.js';
import { testGuestManifest, type ClusterVms } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { signalRecorded } from '../support/qemu-process.js';

const run = promisify(execFile);
const NAMESPACE = 'snapshots';
const READY = 'VMOP-GUEST-READY';
const VM = 'snapped';
const TAG = 'vmop-snapshot-one';

const withDataDisk = (manifest: string, source = '') =>
  manifest.replace(
    '    networks: []\n',
    `    networks: []
    disks:
    - volumeClaimTemplate:
        metadata: {name: data}
        spec:
          resources: {requests: {storage: 16Mi}}
${source}`,
  );

describe('snapshots: VMs copied on storage without CSI snapshots', () => {
  const bed = useDevBed('dev', { namespaces: [NAMESPACE] });
  let vms: ClusterVms;
  beforeAll(() => {
    vms = bed.vms(NAMESPACE);
  });
  const snapshotOf = async (name: string) =>
    JSON.parse(await vms.kubectl(['get', 'vmsnapshot', name, '-o', 'json'])) as { status?: SnapshotStatus };
  const vmop = (...args: string[]) =>
    run('bin/vmop', ['vm', ...args, '-n', NAMESPACE], { env: bed.env(NAMESPACE) });
  /** The reasons of an object's Events, oldest first. */
  const reasonsOf = async (kind: string, name: string) =>
    (
      await vms.kubectl([
        'get',
        'events',
        '--field-selector',
        `involvedObject.kind=${kind},involvedObject.name=${name}`,
        '--sort-by',
        '.metadata.creationTimestamp',
        '-o',
        'jsonpath={.items[*].reason}',
      ])
    )
      .split(' ')
      .filter(Boolean);
  const setState = (state: string) =>
    vms.kubectl(['patch', 'vm', VM, '--type', 'merge', '-p', JSON.stringify({ spec: { vm: { state } } })]);

  /** A file of a claim, read by a pod as `restricted` admits it, with the runner image (one the node has). */
  async function fileOfClaim(claim: string, file: string): Promise<string> {
    const pod = `read-${claim}`;
    const image = bed.state().cluster.runnerImage;
    await vms.kubectl([
      'run',
      pod,
      '--image',
      image,
      '--image-pull-policy',
      'Never',
      '--restart',
      'Never',
      '--overrides',
      JSON.stringify({
        spec: {
          securityContext: {
            runAsNonRoot: true,
            runAsUser: 65532,
            seccompProfile: { type: 'RuntimeDefault' },
          },
          containers: [
            {
              name: 'read',
              image,
              imagePullPolicy: 'Never',
              command: ['cat', `/claim/${file}`],
              volumeMounts: [{ name: 'claim', mountPath: '/claim', readOnly: true }],
              securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
            },
          ],
          volumes: [{ name: 'claim', persistentVolumeClaim: { claimName: claim, readOnly: true } }],
        },
      }),
    ]);
    await vms.kubectl(['wait', '--for=jsonpath={.status.phase}=Succeeded', `pod/${pod}`, '--timeout=120s']);
    const content = await vms.kubectl(['logs', pod]);
    await vms.kubectl(['delete', 'pod', pod, '--wait=false']);
    return content;
  }

  it("a stopped VM's snapshot copies its disk and runner data, holding the VM's start until they are copied", async () => {
    // What does not exist is said at once, not waited for.
    await expect(vmop('snapshot', 'no-such-vm')).rejects.toThrow(
      `VirtualMachine ${NAMESPACE}/no-such-vm does not exist`,
    );
    await vms.apply(withDataDisk(testGuestManifest(VM, NAMESPACE)));
    await expect(vmop('restore', VM, '--snapshot', 'none-yet')).rejects.toThrow(
      `VirtualMachineSnapshot ${NAMESPACE}/none-yet does not exist`,
    );
    // Its claim made and its pod running first: under load that alone took most of the console's
    // 120 s (stop 61's CI run, stop 62's run2).
    await vms.waitForVm(VM, (vm) => expect(vm.status?.phase).toBe('Running'), 300_000);
    await vms.waitForConsole(VM, READY);
    await vms.typeOnConsole(VM, `echo ${TAG} | dd of=/dev/vda conv=fsync`);
    await setState('Stopped');
    await vms.waitForVm(VM, (vm) => expect(vm.status?.phase).toBe('Stopped'), 180_000);

    const { stdout } = await vmop('snapshot', VM, '--name', 'first');
    expect(stdout).toContain(`virtualmachinesnapshot/first created (of ${NAMESPACE}/${VM})`);
    // Asked to run again as soon as the copy begins: it starts once the copies are made.
    await eventually(
      async () => expect((await snapshotOf('first')).status?.phase).not.toBe('Pending'),
      120_000,
    );
    await setState('Running');
    const ready = await eventually(async () => {
      const { status } = await snapshotOf('first');
      expect(status?.phase).toBe('Ready');
      return status!;
    }, 180_000);
    expect(ready).toMatchObject({
      consistency: 'Stopped',
      size: '17Mi', // 16Mi and the runner data's 1Mi
      virtualMachine: {
        spec: expect.objectContaining({
          runnerTemplate: expect.objectContaining({ source: 'test-guest.liquid' }),
        }),
      },
    });
    expect(
      ready.volumes!.map((volume) => [volume.name, volume.copyClaimName, volume.volumeMode, volume.phase]),
    ).toEqual([
      ['runner-data', 'first-runner-data', 'Filesystem', 'Ready'],
      ['data-disk', 'first-data-disk', 'Block', 'Ready'],
    ]);
    // Its Events: when it began copying, and when it was Ready.
    await eventually(async () =>
      expect(
        (await reasonsOf('VirtualMachineSnapshot', 'first')).filter((r) => r.startsWith('Snapshot')),
      ).toEqual(['SnapshotStarted', 'SnapshotReady']),
    );
    const table = await vms.kubectl(['get', 'vmsnapshot', 'first']);
    expect(table).toMatch(/NAME\s+VM\s+PHASE\s+CONSISTENCY\s+SIZE\s+AGE/);
    expect(table).toMatch(new RegExp(`first\\s+${VM}\\s+Ready\\s+Stopped\\s+17Mi`));
    // The VM started after the copies, not during them.
    await vms.waitForVm(VM, (vm) => expect(vm.status?.phase).toBe('Running'));
    const podMade = await vms.kubectl([
      'get',
      'pod',
      '-l',
      `app.kubernetes.io/instance=${VM},app.kubernetes.io/component=vm-runner`,
      '-o',
      'jsonpath={.items[0].metadata.creationTimestamp}',
    ]);
    expect(Date.parse(podMade)).toBeGreaterThanOrEqual(Math.floor(Date.parse(ready.readyAt!) / 1000) * 1000);
    // The runner data's copy has the serial log of the run before the snapshot.
    expect(await fileOfClaim('first-runner-data', 'console.log')).toContain(READY);
    // Its waits add up past the suite's 300 s on a slow machine (CI's took 2.5× this one's time).
  }, 600_000);

  it('a clone of the snapshot is a VM of its own that finds what the VM had written before it', async () => {
    // Stopped after the test, passed or not (its disks stay): a clone left running slowed the next
    // tests past their timeouts.
    onTestFinished(async () => {
      await vms.kubectl(['delete', 'vm', 'from-snapshot', '--wait=false', '--ignore-not-found']);
    });
    const { stdout } = await vmop(
      'clone',
      VM,
      '--snapshot',
      'first',
      '--name',
      'from-snapshot',
      '--start',
      '--wait',
    );
    expect(stdout).toContain('Completed: VirtualMachine from-snapshot made from snapshot first');
    // Its disk is imported from the snapshot's copy before its pod starts (60 s under load), and
    // it boots from that disk through the BIOS (CI once saw no output for 120 s).
    await vms.waitForVm('from-snapshot', (vm) => expect(vm.status?.phase).toBe('Running'), 300_000);
    await vms.waitForConsole('from-snapshot', READY, 300_000);
    await vms.typeOnConsole(
      'from-snapshot',
      `echo copied-$(dd if=/dev/vda bs=${TAG.length} count=1 2>/dev/null)`,
    );
    await vms.waitForConsole('from-snapshot', `copied-${TAG}`);
    // Its own machine: another UUID than the VM it was cloned from (the runner data is new).
    const uuid = async (name: string) =>
      vms.kubectl([
        'exec',
        (await vms.getVm(name)).status!.runnerPod!.name,
        '--',
        'cat',
        '/var/local/vm-data/uuid.txt',
      ]);
    expect((await uuid('from-snapshot')).trim()).not.toBe((await uuid(VM)).trim());
  }, 900_000);

  it('a restore with --stop stops the VM, writes the snapshot back and starts the VM again: its disk is as it was', async () => {
    const booted = (notRunId?: string) =>
      vms.waitForVm(VM, (vm) => {
        expect(vms.condition(vm, 'Booted')?.status).toBe('True');
        if (notRunId) expect(vm.status?.runner?.runId).not.toBe(notRunId);
      });
    const before = await booted();
    await vms.typeOnConsole(VM, 'echo overwritten-after-the-snapshot | dd of=/dev/vda conv=fsync');
    await vms.typeOnConsole(VM, `echo then-$(dd if=/dev/vda bs=11 count=1 2>/dev/null)`);
    await vms.waitForConsole(VM, 'then-overwritten');

    const { stdout } = await vmop('restore', VM, '--snapshot', 'first', '--stop', '--wait');
    expect(stdout).toMatch(new RegExp(`virtualmachinerestore/${VM}-restore-\\w+ created`));
    expect(stdout).toContain('Completed: 2 volumes restored from snapshot first; the VM is started again');
    const restarted = await booted(before.status!.runner!.runId);
    expect(restarted.spec.vm.state).toBe('Running');
    await vms.typeOnConsole(VM, `echo restored-$(dd if=/dev/vda bs=${TAG.length} count=1 2>/dev/null)`);
    await vms.waitForConsole(VM, `restored-${TAG}`);
    expect(await vms.kubectl(['get', 'vmrestore'])).toMatch(
      new RegExp(`${VM}-restore-\\w+\\s+${VM}\\s+first\\s+Completed`),
    );
  });

  it("a running VM's snapshot, frozen through its guest agent, holds what the guest had written at the cut; restored, the guest finds exactly that", async () => {
    const booted = await vms.waitForVm(VM, (vm) =>
      expect(vms.condition(vm, 'AgentConnected')?.status).toBe('True'),
    );
    const runId = booted.status!.runner!.runId;
    await vms.typeOnConsole(VM, 'echo written-before-the-cut | dd of=/dev/vda conv=fsync');
    const { stdout } = await vmop('snapshot', VM, '--name', 'live', '--wait');
    expect(stdout).toContain('virtualmachinesnapshot/live created');
    const ready = (await snapshotOf('live')).status!;
    expect(ready).toMatchObject({ phase: 'Ready', consistency: 'FileSystem' });
    expect(ready.runner).toMatchObject({ pod: booted.status!.runnerPod!.name, frozenMs: expect.any(Number) });
    expect(ready.volumes!.map((volume) => [volume.name, volume.phase])).toEqual([
      ['runner-data', 'Ready'],
      ['data-disk', 'Ready'],
    ]);
    // The guest ran on through it, in the same runner, which is told the copy is done.
    await vms.waitForVm(VM, (vm) => {
      expect(vm.status?.runner?.runId).toBe(runId);
      expect(vm.status?.snapshotCopy).toBeUndefined();
    });
    await vms.typeOnConsole(VM, 'echo written-after-the-cut | dd of=/dev/vda conv=fsync');

    await vmop('restore', VM, '--snapshot', 'live', '--stop', '--wait');
    await vms.waitForVm(VM, (vm) => {
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
      expect(vm.status?.runner?.runId).not.toBe(runId);
    });
    await vms.typeOnConsole(VM, 'echo restored-$(dd if=/dev/vda bs=22 count=1 2>/dev/null)');
    await vms.waitForConsole(VM, 'restored-written-before-the-cut');
    await vms.kubectl(['delete', 'vmsnapshot', 'live']);
  });

  it("the managers SIGKILLed mid-way through a running VM's snapshot: the copy goes on, the guest is thawed and runs on, the snapshot is Ready", async () => {
    const booted = await vms.waitForVm(VM, (vm) =>
      expect(vms.condition(vm, 'AgentConnected')?.status).toBe('True'),
    );
    await vmop('snapshot', VM, '--name', 'killed');
    // The cut is made and its export pods serve: both managers die (vmop dev starts them again, as
    // a Deployment would), before or while the runner copies.
    await eventually(
      async () => expect((await snapshotOf('killed')).status?.runner?.targets?.length).toBe(1),
      120_000,
    );
    const killed = bed.state().managers;
    for (const manager of killed) signalRecorded(manager);
    await eventually(
      () => expect(bed.state().managers.map((m) => m.restarts)).toEqual(killed.map((m) => m.restarts + 1)),
      60_000,
    );
    const done = await eventually(async () => {
      const { status } = await snapshotOf('killed');
      expect(status?.phase).toMatch(/^(Ready|Failed)$/);
      return status!;
    }, 180_000);
    expect(done, JSON.stringify(done)).toMatchObject({ phase: 'Ready', consistency: 'FileSystem' });
    // Thawed by the runner (the frozen time is measured at the thaw), bounded by its 60 s watchdog.
    expect(done.runner?.frozenMs).toBeLessThan(60_000);
    await vms.waitForVm(VM, (vm) => {
      expect(vm.status?.runner?.runId).toBe(booted.status!.runner!.runId);
      expect(vm.status?.snapshotCopy).toBeUndefined();
      expect(vms.condition(vm, 'AgentConnected')?.status).toBe('True');
    });
    await vms.typeOnConsole(VM, 'echo still-$(echo running)');
    await vms.waitForConsole(VM, 'still-running');
    await vms.kubectl(['delete', 'vmsnapshot', 'killed']);
    // Its waits add up past the suite's 300 s on a slow machine (CI's took 2.5× this one's time).
  }, 600_000);

  it("a snapshot's disk exported: downloaded through the apiserver as a sparse qcow2 that holds what the VM wrote, and imported over HTTPS from the export's URL by a new VM that trusts its certificate", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vmop-export-'));
    const file = join(dir, 'data.qcow2');
    // A running VM's own disks are not served: the export waits, saying why.
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineExport
metadata: {name: of-running, namespace: ${NAMESPACE}}
spec: {source: {virtualMachineName: ${VM}}}
`);
    await eventually(async () => {
      const said = await vms.kubectl([
        'get',
        'vmexport',
        'of-running',
        '-o',
        'jsonpath={.status.phase}: {.status.message}',
      ]);
      expect(said).toMatch(
        new RegExp(`^Pending: VM ${VM} runs \\(pod [a-z0-9-]+\\): its disks are served while it is stopped`),
      );
    }, 60_000);
    expect(await vms.kubectl(['get', 'pod', 'of-running-export', '--ignore-not-found', '-o', 'name'])).toBe(
      '',
    );
    await vms.kubectl(['delete', 'vmexport', 'of-running']);
    const { stderr } = await vmop('export', VM, '--snapshot', 'first', '--disk', 'data', '-o', file);
    expect(stderr).toMatch(new RegExp(`data\\.qcow2: \\d+ bytes written to ${file}`));
    const info = JSON.parse((await run('qemu-img', ['info', '--output=json', file])).stdout) as {
      format: string;
      'virtual-size': number;
    };
    expect(info).toMatchObject({ format: 'qcow2', 'virtual-size': 16 * 1024 * 1024 });
    expect((await stat(file)).size).toBeLessThan(4 * 1024 * 1024); // sparse: 16 MiB, one line written
    await run('qemu-img', ['convert', '-O', 'raw', file, join(dir, 'converted.raw')]);
    expect((await readFile(join(dir, 'converted.raw'))).subarray(0, TAG.length).toString()).toBe(TAG);
    // Raw: the disk's bytes, written sparse (the zero blocks are holes in the file).
    const raw = join(dir, 'data.raw');
    await vmop('export', VM, '--snapshot', 'first', '--disk', 'data', '--format', 'raw', '-o', raw);
    const rawStat = await stat(raw);
    expect(rawStat.size).toBe(16 * 1024 * 1024);
    expect(rawStat.blocks * 512).toBeLessThan(1024 * 1024);
    expect((await readFile(raw)).equals(await readFile(join(dir, 'converted.raw')))).toBe(true);
    // Downloaded, the export goes.
    await eventually(
      async () => expect(await vms.kubectl(['get', 'vmexport', '-o', 'name'])).toBe(''),
      60_000,
    );

    // Without -o: URLs with the token, for pods in the cluster, until the export expires.
    const { stdout } = await vmop('export', VM, '--snapshot', 'first', '--name', 'for-pods', '--ttl', '30m');
    const url = /data \(qcow2\): (https:\S+)/.exec(stdout)?.[1];
    expect(url).toContain(`https://for-pods-export.${NAMESPACE}.svc:8443/disks/data.qcow2?token=`);
    // HTTPS: the importer trusts the export's own certificate, from its status.
    const certificate = await vms.kubectl([
      'get',
      'vmexport',
      'for-pods',
      '-o',
      'jsonpath={.status.certificate}',
    ]);
    expect(certificate).toMatch(/^-----BEGIN CERTIFICATE-----/);
    await vms.apply(
      withDataDisk(
        testGuestManifest('from-export', NAMESPACE),
        `      source: {http: {url: "${url}", caCertificate: ${JSON.stringify(certificate)}}}\n`,
      ),
    );
    await vms.waitForVm('from-export', (vm) => expect(vm.status?.phase).toBe('Running'), 300_000);
    await vms.waitForConsole('from-export', READY);
    await vms.typeOnConsole(
      'from-export',
      `echo exported-$(dd if=/dev/vda bs=${TAG.length} count=1 2>/dev/null)`,
    );
    await vms.waitForConsole('from-export', `exported-${TAG}`);
    expect(await reasonsOf('VirtualMachineExport', 'for-pods')).toContain('ExportReady');
    await vms.kubectl(['delete', 'vmexport', 'for-pods']);

    // A stopped VM's own disk: what its guest wrote last.
    await vms.typeOnConsole('from-export', 'echo written-by-the-importer-s-vm | dd of=/dev/vda conv=fsync');
    await vms.kubectl([
      'patch',
      'vm',
      'from-export',
      '--type',
      'merge',
      '-p',
      '{"spec":{"vm":{"state":"Stopped"}}}',
    ]);
    await vms.waitForVm('from-export', (vm) => expect(vm.status?.phase).toBe('Stopped'), 180_000);
    const own = join(dir, 'own.raw');
    await vmop('export', 'from-export', '--disk', 'data', '--format', 'raw', '-o', own);
    expect((await readFile(own)).subarray(0, 29).toString()).toBe('written-by-the-importer-s-vm\n');
    await rm(dir, { recursive: true, force: true });
    await vms.kubectl(['delete', 'vm', 'from-export', '--wait=false']);
    // Its waits add up past the suite's 300 s on a slow machine (CI's took 2.5× this one's time).
  }, 600_000);

  it('a snapshot that is deleted takes its copies with it; the VM keeps its own', async () => {
    await vms.kubectl(['delete', 'vmsnapshot', 'first']);
    await eventually(async () => {
      const claims = await vms.kubectl(['get', 'pvc', '-o', 'jsonpath={.items[*].metadata.name}']);
      expect(claims.split(' ').sort()).toEqual(
        [
          `${VM}-runner-data`,
          `${VM}-data-disk`,
          'from-snapshot-runner-data',
          'from-snapshot-data-disk',
          'from-export-runner-data',
          'from-export-data-disk',
          'vmop-image-repository', // the namespace's, which vmop dev makes
        ].sort(),
      );
    }, 60_000);
    await vms.kubectl(['delete', 'vm', VM, 'from-snapshot', '--wait=false', '--ignore-not-found']);
  });
});
