import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { ImportProgress } from '../../../src/api/import-progress.js';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { VirtualMachineImage } from '../../../src/api/virtual-machine-image.js';
import { planDiskImports } from '../../../src/reconcilers/virtual-machine/disks/imports.js';
import {
  desiredImporterPod,
  importerPod,
} from '../../../src/reconcilers/virtual-machine/disks/importer-pod.js';
import {
  IMPORTED_ANNOTATION,
  IMPORT_SOURCE_ANNOTATION,
  sourceDigest,
} from '../../../src/reconcilers/virtual-machine/naming.js';
import { runnerClaims } from '../../../src/reconcilers/virtual-machine/disks/claims.js';

const URL = 'http://images.example/guest.qcow2';
const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const source = { http: { url: URL } };

function vmWithSource(url = URL, status?: object) {
  return VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
    spec: {
      vm: {
        disks: [
          {
            volumeClaimTemplate: {
              metadata: { name: 'system' },
              spec: { resources: { requests: { storage: '1Gi' } } },
            },
            source: { http: { url } },
          },
        ],
      },
    },
    ...(status && { status }),
  });
}

const claim = (annotations: Record<string, string> = { [IMPORT_SOURCE_ANNOTATION]: sourceDigest(source) }) =>
  ({ metadata: { name: 'vm-system-disk', namespace: 'ns', annotations } }) as V1PersistentVolumeClaim;

/** The importer pod as vmop makes it, in `phase`, with the `message` its container ended with. */
function importer(phase: string, message?: string, url = URL): V1Pod {
  const pod = desiredImporterPod(
    vmWithSource(url),
    { volume: 'system-disk', claimName: 'vm-system-disk', source: { http: { url } } },
    { image: 'runner:1' },
  );
  pod.metadata!.uid = 'pod-uid';
  pod.status = {
    phase,
    ...(phase !== 'Running' &&
      phase !== 'Pending' && {
        containerStatuses: [
          {
            name: 'importer',
            image: '',
            imageID: '',
            ready: false,
            restartCount: 0,
            state: { terminated: { exitCode: 1, ...(message && { message }) } },
          },
        ],
      }),
  };
  return pod;
}

function plan(
  existing: V1PersistentVolumeClaim[],
  importerPods: V1Pod[] = [],
  progress = new Map<string, ImportProgress>(),
  vm = vmWithSource(),
) {
  return planDiskImports({ vm, claims: runnerClaims(vm, existing), existing, importerPods, progress });
}

describe('disk imports', () => {
  it('a disk with a source and no claim yet: its claim is made, marked with the source; the VM waits', () => {
    const imports = plan([]);
    expect(imports.createClaims.map((c) => c.desired.metadata?.annotations)).toEqual([
      { [IMPORT_SOURCE_ANNOTATION]: sourceDigest(source) },
    ]);
    expect(imports.waiting).toEqual({
      reason: 'ImportingDisks',
      message: 'waiting for disks to be imported: system-disk',
    });
  });

  it('a claim marked for import without an importer: one is started', () => {
    const imports = plan([claim()]);
    expect(imports.startImports).toEqual([{ volume: 'system-disk', claimName: 'vm-system-disk', source }]);
    expect(imports.statuses.get('system-disk')).toEqual({ phase: 'Importing', message: `importing ${URL}` });
  });

  it('an importer pod waits until its claim can be used, and the disk says why', () => {
    const vm = vmWithSource();
    const unbound = claim();
    const imports = planDiskImports({
      vm,
      claims: runnerClaims(vm, [unbound]),
      existing: [unbound],
      importerPods: [],
      progress: new Map(),
      claimWait: (made) => ({
        claim: made.metadata!.name!,
        why: 'waiting for StorageClass fast to provide a volume',
      }),
    });
    expect(imports.startImports).toEqual([]);
    expect(imports.statuses.get('system-disk')?.message).toBe(
      `importing ${URL}; its claim vm-system-disk is not bound yet (waiting for StorageClass fast to provide a volume)`,
    );
    expect(imports.waiting?.reason).toBe('ImportingDisks');
  });

  it('shows the progress its own importer pod sent, not an earlier pod’s', () => {
    const own = new Map([['system-disk', { bytes: 4096, percent: 42.7, attempt: 2, podUid: 'pod-uid' }]]);
    expect(plan([claim()], [importer('Running')], own).statuses.get('system-disk')).toEqual({
      phase: 'Importing',
      progress: '42%',
      importedBytes: 4096,
      message: `importing ${URL} (attempt 2)`,
    });
    const earlier = new Map([['system-disk', { bytes: 4096, percent: 42, attempt: 1, podUid: 'old-uid' }]]);
    expect(plan([claim()], [importer('Running')], earlier).statuses.get('system-disk')).toEqual({
      phase: 'Importing',
      message: `importing ${URL}`,
    });
  });

  it('says why an importer pod does not start', () => {
    const pending = importer('Pending');
    pending.status!.conditions = [
      { type: 'PodScheduled', status: 'False', message: 'persistentvolumeclaim "golden" not found' },
    ];
    expect(plan([claim()], [pending]).statuses.get('system-disk')?.message).toBe(
      `importing ${URL}; its pod cannot be scheduled: persistentvolumeclaim "golden" not found`,
    );
  });

  it('a succeeded import marks the claim imported; then the VM may start and the pod goes', () => {
    const outcome = { result: 'Succeeded', reason: 'Imported', message: 'imported qcow2 image (sha256 x)' };
    const done = plan([claim()], [importer('Succeeded', JSON.stringify(outcome))]);
    expect(done.markImported).toEqual([{ claim: 'vm-system-disk', digest: sourceDigest(source) }]);
    expect(done.ended).toEqual([{ volume: 'system-disk', outcome }]);
    expect(done.waiting?.reason).toBe('ImportingDisks');
    // How long it took (the importer pod's run), for vmop_vm_disk_import_duration_seconds.
    const timed = importer('Succeeded', JSON.stringify(outcome));
    timed.status!.startTime = '2026-11-28T10:00:00Z' as never; // as the watch cache holds it
    timed.status!.containerStatuses![0]!.state!.terminated!.finishedAt = '2026-11-28T10:01:30Z' as never;
    expect(plan([claim()], [timed]).ended).toEqual([{ volume: 'system-disk', outcome, seconds: 90 }]);
    const marked = claim({ [IMPORT_SOURCE_ANNOTATION]: 'd', [IMPORTED_ANNOTATION]: sourceDigest(source) });
    const after = plan([marked], [importer('Succeeded', JSON.stringify(outcome))]);
    expect(after.waiting).toBeUndefined();
    expect(after.deletePods.map((p) => p.metadata?.name)).toEqual(['vm-import-system-disk']);
  });

  it('a failed import: the disk Failed with its message, the VM waits, nothing is retried', () => {
    const outcome = { result: 'Failed', reason: 'ChecksumMismatch', message: 'the SHA-256 of x is y' };
    const failed = plan([claim()], [importer('Failed', JSON.stringify(outcome))]);
    expect(failed.statuses.get('system-disk')).toEqual({
      phase: 'Failed',
      message: 'ChecksumMismatch: the SHA-256 of x is y',
    });
    expect(failed.waiting).toEqual({
      reason: 'DiskImportFailed',
      message: 'importing a disk failed: system-disk: the SHA-256 of x is y',
    });
    expect(failed.deletePods).toEqual([]);
    expect(failed.startImports).toEqual([]);
    expect(failed.ended).toHaveLength(1);
    // Told once: the status already says so.
    const told = vmWithSource(URL, {
      disks: [{ name: 'system-disk', claim: 'vm-system-disk', phase: 'Failed' }],
    });
    expect(plan([claim()], [importer('Failed', JSON.stringify(outcome))], new Map(), told).ended).toEqual([]);
  });

  it('an importer that ended without an outcome (killed) is replaced; one for an old source too', () => {
    const killed = plan([claim()], [importer('Failed')]);
    expect(killed.deletePods.map((p) => p.metadata?.name)).toEqual(['vm-import-system-disk']);
    expect(killed.statuses.get('system-disk')?.message).toBe(
      'the importer pod vm-import-system-disk ended without a result (killed); starting over',
    );
    const outcome = JSON.stringify({ result: 'Failed', reason: 'HttpError', message: 'x answered HTTP 404' });
    const changed = plan([claim()], [importer('Failed', outcome, 'http://images.example/old.qcow2')]);
    expect(changed.deletePods).toHaveLength(1);
    expect(changed.waiting?.reason).toBe('ImportingDisks');
  });

  it('a claim that existed before (not made for the import) is never overwritten', () => {
    const imports = plan([claim({})]);
    expect(imports).toMatchObject({ createClaims: [], startImports: [], markImported: [], deletePods: [] });
    expect(imports.waiting).toBeUndefined();
  });
});

describe('disks filled from a VirtualMachineImage', () => {
  const fromImage = () => {
    const vm = vmWithSource();
    vm.spec.vm.disks[0]!.source = { image: { name: 'guest' } };
    return vm;
  };
  const imageClaimAnnotation = { [IMPORT_SOURCE_ANNOTATION]: sourceDigest({ image: { name: 'guest' } }) };
  const image = (status?: object) =>
    VirtualMachineImage.parse({
      apiVersion: 'vmoperator.jdrupes.org/v1',
      kind: 'VirtualMachineImage',
      metadata: { name: 'guest', namespace: 'ns', uid: 'image-uid' },
      spec: { source: { http: { url: URL } }, storage: { size: '1Gi' } },
      ...(status && { status }),
    });
  const planWith = (found: VirtualMachineImage | undefined, existing = [claim(imageClaimAnnotation)]) => {
    const vm = fromImage();
    return planDiskImports({
      vm,
      claims: runnerClaims(vm, existing),
      existing,
      importerPods: [],
      progress: new Map(),
      images: () => found,
    });
  };

  it('waits for an image that is missing or not Ready yet; the VM waits with it', () => {
    const missing = planWith(undefined);
    expect(missing.statuses.get('system-disk')).toEqual({
      phase: 'Importing',
      message: 'waiting for image guest, which does not exist',
    });
    expect(missing.startImports).toEqual([]);
    expect(missing.waiting?.reason).toBe('ImportingDisks');
    const importing = planWith(image({ phase: 'Importing', progress: '42%' }));
    expect(importing.statuses.get('system-disk')?.message).toBe('waiting for image guest (Importing 42%)');
  });

  it('a Failed image fails the disk with its message', () => {
    const failed = planWith(image({ phase: 'Failed', message: 'HttpError: 404' }));
    expect(failed.statuses.get('system-disk')).toEqual({
      phase: 'Failed',
      message: 'image guest failed: HttpError: 404',
    });
    expect(failed.waiting?.reason).toBe('DiskImportFailed');
  });

  it("a Ready image: its claim is copied, the claim's mark is the image's name", () => {
    const ready = planWith(image({ phase: 'Ready', claim: 'guest-image' }));
    expect(ready.startImports).toEqual([
      {
        volume: 'system-disk',
        claimName: 'vm-system-disk',
        source: { image: { name: 'guest' } },
        copyFrom: { pvc: { name: 'guest-image' } },
      },
    ]);
    const pod = desiredImporterPod(fromImage(), ready.startImports[0]!, { image: 'runner:1' });
    expect(pod.spec!.containers[0]!.args!.slice(0, 3)).toEqual(['import', '--pvc', 'guest-image']);
    // Once imported, the image no longer matters to the disk.
    const imported = planWith(undefined, [claim({ ...imageClaimAnnotation, [IMPORTED_ANNOTATION]: 'x' })]);
    expect(imported.statuses.size).toBe(0);
    expect(imported.waiting).toBeUndefined();
  });
});

describe('the importer pod', () => {
  it('runs `vmop import` without privileges, API access or restarts, on the claim as a block device', () => {
    const vm = vmWithSource();
    const pod = desiredImporterPod(
      vm,
      {
        volume: 'system-disk',
        claimName: 'vm-system-disk',
        source: { http: { url: URL, sha256: 'a'.repeat(64), caCertificate: PEM } },
      },
      { image: 'runner:1', pullPolicy: 'Never' },
    );
    const container = pod.spec!.containers[0]!;
    expect(container.args).toEqual([
      'import',
      ...['--url', URL, '--sha256', 'a'.repeat(64), '--ca-certificate', PEM],
      ...['--target', '/dev/vmop-disk', '--scratch', '/scratch', '--volume', 'system-disk'],
    ]);
    expect(container.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(pod.spec).toMatchObject({ restartPolicy: 'Never', automountServiceAccountToken: false });
    // Pod Security "restricted": a user of no account, the runtime's default seccomp profile.
    expect(pod.spec!.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 65532,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(pod.spec!.hostNetwork).toBeUndefined();
    const pulled = desiredImporterPod(
      vm,
      {
        volume: 'system-disk',
        claimName: 'vm-system-disk',
        source: { registry: { image: 'r:5000/d:1', insecure: true } },
      },
      { image: 'runner:1' },
    );
    expect(pulled.spec!.containers[0]!.args!.slice(0, 4)).toEqual([
      'import',
      '--image',
      'r:5000/d:1',
      '--insecure',
    ]);
    const copied = desiredImporterPod(
      vm,
      { volume: 'system-disk', claimName: 'vm-system-disk', source: { pvc: { name: 'golden' } } },
      { image: 'runner:1' },
    );
    expect(copied.spec!.containers[0]!.args!.slice(0, 5)).toEqual([
      'import',
      ...['--pvc', 'golden', '--source-device', '/dev/vmop-source'],
    ]);
    expect(copied.spec!.volumes).toContainEqual({
      name: 'source',
      persistentVolumeClaim: { claimName: 'golden', readOnly: true },
    });
    expect(pod.spec!.volumes![0]).toEqual({
      name: 'disk',
      persistentVolumeClaim: { claimName: 'vm-system-disk' },
    });
  });

  it("an image's upload: the importer listens with the token and certificate of the image's Secret, Ready once it does", () => {
    const pod = importerPod(
      {
        podName: 'disk-image-import',
        namespace: 'ns',
        labels: {},
        ownerReference: { apiVersion: 'v1', kind: 'VirtualMachineImage', name: 'disk', uid: 'u' },
        uploadSecret: 'disk-upload',
      },
      { volume: 'image', claimName: 'disk-image', source: { upload: { sha256: 'b'.repeat(64) } } },
      { image: 'runner:1' },
    );
    const container = pod.spec!.containers[0]!;
    expect(container.args).toEqual([
      'import',
      ...['--upload-port', '8443', '--token-file', '/vmop-upload/token'],
      ...['--tls-cert', '/vmop-upload/tls.crt', '--tls-key', '/vmop-upload/tls.key'],
      ...['--sha256', 'b'.repeat(64)],
      ...['--target', '/dev/vmop-disk', '--scratch', '/scratch', '--volume', 'image'],
    ]);
    expect(container.ports).toEqual([{ name: 'upload', containerPort: 8443 }]);
    expect(container.readinessProbe?.httpGet).toEqual({ path: '/healthz', port: 8443, scheme: 'HTTPS' });
    expect(container.volumeMounts).toContainEqual({
      name: 'upload',
      mountPath: '/vmop-upload',
      readOnly: true,
    });
    expect(pod.spec!.volumes).toContainEqual({ name: 'upload', secret: { secretName: 'disk-upload' } });
    // Still without privileges or API access.
    expect(pod.spec).toMatchObject({ restartPolicy: 'Never', automountServiceAccountToken: false });
  });
});
