import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseRunnerConfig } from '../../../src/api/runner-config.js';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { desiredConfigMap } from '../../../src/reconcilers/virtual-machine/config-map.js';
import {
  desiredRunnerConfig,
  renderRunnerConfig,
  validateRunnerConfig,
} from '../../../src/reconcilers/virtual-machine/runner-config.js';
import { desiredStatefulSet } from '../../../src/reconcilers/virtual-machine/stateful-set.js';
import {
  CLOUD_INIT_SECRET_DIR,
  SYSPREP_SECRET_DIR,
} from '../../../src/reconcilers/virtual-machine/naming.js';
import { provisioningSecretErrors } from '../../../src/reconcilers/virtual-machine/provisioning-secrets.js';
import { deriveStatus } from '../../../src/reconcilers/virtual-machine/status.js';

const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));

function vmFrom(patch: (raw: typeof seed) => void = () => {}): VirtualMachine {
  const raw = structuredClone(seed);
  raw.metadata.uid = '0000-1111';
  raw.metadata.generation = 3;
  patch(raw);
  return VirtualMachine.parse(raw);
}

const options = { defaultRunnerImage: { image: 'vmop/runner:test' } };
const labels = {
  'app.kubernetes.io/name': 'vm-runner',
  'app.kubernetes.io/instance': 'test-vm',
  'app.kubernetes.io/managed-by': 'vm-operator',
};

describe('desiredStatefulSet', () => {
  it('runs one runner pod for a Running VM, with a PVC template per disk carrying the three labels', () => {
    const sts = desiredStatefulSet(vmFrom(), options);
    expect(sts.metadata).toMatchObject({ name: 'test-vm', namespace: 'vmop-demo', labels });
    expect(sts.metadata?.ownerReferences?.[0]).toMatchObject({
      kind: 'VirtualMachine',
      name: 'test-vm',
      uid: '0000-1111',
    });
    expect(sts.spec?.replicas).toBe(1);
    expect(sts.spec?.updateStrategy).toEqual({ type: 'OnDelete' });
    const claims = sts.spec?.volumeClaimTemplates ?? [];
    expect(claims.map((c) => c.metadata?.name)).toEqual(['runner-data', 'system-disk']);
    const system = claims[1]!;
    expect(system.metadata?.labels).toEqual(labels);
    expect(system.spec).toMatchObject({
      storageClassName: '',
      volumeMode: 'Block',
      resources: { requests: { storage: '40Gi' } },
      selector: { matchLabels: { 'vmrunner.jdrupes.org/disk': 'system' } },
    });
    const pod = sts.spec!.template.spec!;
    const runner = pod.containers[0]!;
    expect(runner.image).toBe('vmop/runner:test');
    expect(runner.volumeDevices).toEqual([{ name: 'system-disk', devicePath: '/dev/system-disk' }]);
    expect(runner.volumeMounts).toContainEqual({
      name: 'config',
      mountPath: '/etc/opt/vmrunner',
      readOnly: true,
    });
    expect(pod.volumes).toContainEqual({ name: 'config', configMap: { name: 'test-vm' } });
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(900);
    expect(pod.serviceAccountName).toBe('vm-runner');
    expect(pod.automountServiceAccountToken).toBe(false);
    // Host network for SPICE and taps, cluster DNS for Redis' Service name.
    expect(pod).toMatchObject({ hostNetwork: true, dnsPolicy: 'ClusterFirstWithHostNet' });
    expect(runner.env).toContainEqual({
      name: 'VMOP_REDIS_URL',
      valueFrom: { secretKeyRef: { name: 'vm-runner-redis', key: 'url' } },
    });
  });

  it("requests the VM's CPUs and RAM divided by the overcommit factors, plus the runner's overhead", () => {
    // currentCpus 2, currentRam 4Gi
    const runner = desiredStatefulSet(vmFrom(), options).spec!.template.spec!.containers[0]!;
    expect(runner.resources).toEqual({
      requests: { cpu: '1100m', memory: String(Math.floor((4 * 2 ** 30) / 1.25) + 192 * 2 ** 20) },
    });
    const custom = desiredStatefulSet(vmFrom(), { ...options, overcommit: { cpu: 4, ram: 2 } });
    expect(custom.spec!.template.spec!.containers[0]!.resources).toEqual({
      requests: { cpu: '600m', memory: String(2 * 2 ** 30 + 192 * 2 ** 20) },
    });
    // Without currentCpus and currentRam: the maximums.
    const maximums = vmFrom((raw) => {
      delete raw.spec.vm.currentCpus;
      delete raw.spec.vm.currentRam;
    });
    expect(
      desiredStatefulSet(maximums, options).spec!.template.spec!.containers[0]!.resources?.requests,
    ).toEqual({ cpu: '2100m', memory: String(Math.floor((8 * 2 ** 30) / 1.25) + 192 * 2 ** 20) });
  });

  it("takes the VM's own resources when it has any", () => {
    const vm = vmFrom((raw) => (raw.spec.resources = { limits: { memory: '9Gi' }, requests: { cpu: 3 } }));
    expect(desiredStatefulSet(vm, options).spec!.template.spec!.containers[0]!.resources).toEqual({
      limits: { memory: '9Gi' },
      requests: { cpu: '3' },
    });
    const empty = vmFrom((raw) => (raw.spec.resources = {}));
    expect(
      desiredStatefulSet(empty, options).spec!.template.spec!.containers[0]!.resources?.requests,
    ).toEqual(expect.objectContaining({ cpu: '1100m' }));
  });

  it('mounts the image repository read-only when the namespace has one', () => {
    const without = desiredStatefulSet(vmFrom(), options).spec!.template.spec!;
    expect(without.volumes?.map((v) => v.name)).not.toContain('vmop-image-repository');
    const pod = desiredStatefulSet(vmFrom(), { ...options, hasImageRepository: true }).spec!.template.spec!;
    expect(pod.volumes).toContainEqual({
      name: 'vmop-image-repository',
      persistentVolumeClaim: { claimName: 'vmop-image-repository', readOnly: true },
    });
    expect(pod.containers[0]!.volumeMounts).toContainEqual({
      name: 'vmop-image-repository',
      mountPath: '/var/local/vmop-image-repository',
      readOnly: true,
    });
  });

  it("uses the manager's default image and pull policy unless the VM names an image", () => {
    const withPolicy = { defaultRunnerImage: { image: 'vmop/runner:1', pullPolicy: 'Never' as const } };
    const runner = desiredStatefulSet(vmFrom(), withPolicy).spec!.template.spec!.containers[0]!;
    expect(runner).toMatchObject({ image: 'vmop/runner:1', imagePullPolicy: 'Never' });
    const own = vmFrom((raw) => (raw.spec.image = { source: 'example/runner:2' }));
    const ownRunner = desiredStatefulSet(own, withPolicy).spec!.template.spec!.containers[0]!;
    expect(ownRunner.image).toBe('example/runner:2');
    expect(ownRunner.imagePullPolicy).toBeUndefined();
  });

  it('scales to zero for a Stopped VM', () => {
    const sts = desiredStatefulSet(
      vmFrom((raw) => (raw.spec.vm.state = 'Stopped')),
      options,
    );
    expect(sts.spec?.replicas).toBe(0);
  });

  it('names an unnamed disk disk-<index in the disk list>', () => {
    const vm = vmFrom((raw) => {
      raw.spec.vm.disks.push({
        volumeClaimTemplate: { spec: { resources: { requests: { storage: '1Gi' } } } },
      });
    });
    const names = desiredStatefulSet(vm, options).spec?.volumeClaimTemplates?.map((c) => c.metadata?.name);
    expect(names).toEqual(['runner-data', 'system-disk', 'disk-2']);
  });

  it('uses the image the VM names', () => {
    const vm = vmFrom(
      (raw) => (raw.spec.image = { repository: 'registry.example', path: 'runner', version: '2' }),
    );
    expect(desiredStatefulSet(vm, options).spec?.template.spec?.containers[0]?.image).toBe(
      'registry.example/runner:2',
    );
  });

  it('mounts the display secret when one exists', () => {
    const sts = desiredStatefulSet(vmFrom(), { ...options, displaySecretName: 'my-password' });
    expect(sts.spec?.template.spec?.volumes).toContainEqual({
      name: 'display-secret',
      secret: { secretName: 'my-password' },
    });
  });

  it('mounts the cloud-init and sysprep Secrets as volumes, and the runner config names only their directories', () => {
    const vm = vmFrom((raw) => {
      raw.spec.cloudInit = { secretRef: { name: 'vm-cloud-init' }, metaData: { 'local-hostname': 'h' } };
      raw.spec.sysprep = { secretRef: { name: 'vm-answers' } };
    });
    const pod = desiredStatefulSet(vm, options).spec!.template.spec!;
    expect(pod.volumes).toContainEqual({
      name: 'cloud-init-secret',
      secret: { secretName: 'vm-cloud-init' },
    });
    expect(pod.volumes).toContainEqual({ name: 'sysprep-secret', secret: { secretName: 'vm-answers' } });
    expect(pod.containers[0]!.volumeMounts).toEqual(
      expect.arrayContaining([
        { name: 'cloud-init-secret', mountPath: CLOUD_INIT_SECRET_DIR, readOnly: true },
        { name: 'sysprep-secret', mountPath: SYSPREP_SECRET_DIR, readOnly: true },
      ]),
    );
    const runner = desiredRunnerConfig(vm, { hasDisplaySecret: false })['/Runner'];
    expect(runner.cloudInit).toEqual({
      metaData: { 'local-hostname': 'h' },
      secretDir: CLOUD_INIT_SECRET_DIR,
    });
    expect(runner.sysprepDir).toBe(SYSPREP_SECRET_DIR);
  });

  it('keeps the pod template unchanged when only runtime-changeable fields change (but for the requests)', () => {
    const withoutRequests = (sts: ReturnType<typeof desiredStatefulSet>) => {
      const copy = structuredClone(sts);
      delete copy.spec!.template.spec!.containers[0]!.resources;
      return copy;
    };
    const before = desiredStatefulSet(vmFrom(), options);
    const after = desiredStatefulSet(
      vmFrom((raw) => {
        raw.spec.vm.currentRam = '2Gi';
        raw.spec.vm.currentCpus = 3;
        raw.spec.vm.disks[1].cdrom.image = 'other.iso';
        raw.spec.vm.powerdownTimeout = 60;
      }),
      { ...options, currentGracePeriodSeconds: before.spec?.template.spec?.terminationGracePeriodSeconds },
    );
    expect(withoutRequests(after)).toEqual(withoutRequests(before));
  });

  it('grows the grace period when powerdownTimeout grows beyond it', () => {
    const sts = desiredStatefulSet(
      vmFrom((raw) => (raw.spec.vm.powerdownTimeout = 2000)),
      { ...options, currentGracePeriodSeconds: 905 },
    );
    expect(sts.spec?.template.spec?.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(2000);
  });
});

describe('desiredConfigMap / runner config', () => {
  it('renders a config.yaml the runner accepts, derived from the spec', () => {
    const vm = vmFrom();
    const cm = desiredConfigMap(
      vm,
      renderRunnerConfig(desiredRunnerConfig(vm, { hasDisplaySecret: false })).yaml,
    );
    expect(cm.metadata).toMatchObject({ name: 'test-vm', namespace: 'vmop-demo', labels });
    const parsed = parseRunnerConfig(cm.data!['config.yaml']!);
    if (!parsed.ok) throw new Error(parsed.errors.join('\n'));
    const runner = parsed.config['/Runner'];
    expect(runner.vm).toMatchObject({ name: 'test-vm', maximumCpus: 4, currentCpus: 2, firmware: 'uefi' });
    expect(runner.vm.maximumRam).toBe(8 * 2 ** 30);
    expect(runner.vm.currentRam).toBe(4 * 2 ** 30);
    expect(runner.vm.drives).toEqual([
      expect.objectContaining({ type: 'raw', resource: '/dev/system-disk' }),
      expect.objectContaining({ type: 'ide-cd', file: '' }),
    ]);
    expect(runner.vm.network).toEqual([expect.objectContaining({ type: 'user' })]);
    expect(runner.cloudInit).toBeUndefined();
  });

  it('fills in cloud-init local-hostname unless given, and leaves instance-id to the runner (from the data)', () => {
    const vm = vmFrom((raw) => (raw.spec.cloudInit = { userData: { packages: ['nginx'] } }));
    const config = desiredRunnerConfig(vm, { hasDisplaySecret: false });
    expect(config['/Runner'].cloudInit?.metaData).toEqual({ 'local-hostname': 'test-vm' });
    // A spec change elsewhere (a new generation) leaves the cloud-init data as it was.
    const later = vmFrom((raw) => {
      raw.spec.cloudInit = { userData: { packages: ['nginx'] } };
      raw.metadata.generation = 9;
    });
    expect(desiredRunnerConfig(later, { hasDisplaySecret: false })['/Runner'].cloudInit).toEqual(
      config['/Runner'].cloudInit,
    );
    const given = vmFrom((raw) => (raw.spec.cloudInit = { metaData: { 'instance-id': 'fixed' } }));
    expect(desiredRunnerConfig(given, { hasDisplaySecret: false })['/Runner'].cloudInit?.metaData).toEqual({
      'instance-id': 'fixed',
      'local-hostname': 'test-vm',
    });
  });

  it('reports what the runner would reject, naming the field', () => {
    const vm = vmFrom((raw) => (raw.spec.vm.currentRam = '1e3'));
    expect(validateRunnerConfig(desiredRunnerConfig(vm, { hasDisplaySecret: false }))).toEqual([
      expect.stringMatching(/vm\.currentRam/),
    ]);
  });
});

describe('deriveStatus', () => {
  const now = new Date('2026-01-01T00:00:00Z');
  const pod = (phase: string, nodeName?: string) => ({
    metadata: { name: 'test-vm-0' },
    spec: { nodeName, containers: [] },
    status: { phase },
  });

  it.each([
    ['Running', undefined, 'Pending'],
    ['Running', pod('Pending'), 'Pending'],
    ['Running', pod('Pending', 'node-1'), 'Starting'],
    ['Running', pod('Running', 'node-1'), 'Starting'], // until its runner reports
    ['Running', pod('Failed', 'node-1'), 'Failed'],
    ['Stopped', pod('Running', 'node-1'), 'Stopping'],
    ['Stopped', undefined, 'Stopped'],
  ])('state %s with pod %j is %s', (state, observedPod, phase) => {
    const vm = vmFrom((raw) => (raw.spec.vm.state = state));
    const status = deriveStatus(vm, { pod: observedPod as never, specErrors: [], now });
    expect(status.phase).toBe(phase);
    expect(status.observedGeneration).toBe(3);
    expect(status.conditions?.find((c) => c.type === 'Running')?.status).toBe(
      phase === 'Running' ? 'True' : 'False',
    );
  });

  it('reports the node and keeps lastTransitionTime while a condition holds', () => {
    const vm = vmFrom();
    const first = deriveStatus(vm, { pod: pod('Running', 'node-1') as never, specErrors: [], now });
    expect(first.node).toBe('node-1');
    const later = deriveStatus(
      { ...vm, status: first },
      { pod: pod('Running', 'node-1') as never, specErrors: [], now: new Date('2026-01-02T00:00:00Z') },
    );
    expect(later.conditions).toEqual(first.conditions);
  });

  it('carries spec errors in the SpecValid condition', () => {
    const status = deriveStatus(vmFrom(), { specErrors: ['spec.vm.currentCpus: too many'], now });
    expect(status.conditions?.find((c) => c.type === 'SpecValid')).toMatchObject({
      status: 'False',
      reason: 'InvalidSpec',
      message: 'spec.vm.currentCpus: too many',
    });
  });
});

describe('provisioning Secrets', () => {
  const vm = vmFrom((raw) => {
    raw.spec.cloudInit = { secretRef: { name: 'init' } };
    raw.spec.sysprep = { secretRef: { name: 'answers' } };
  });
  const secret = (data: Record<string, string>) => ({ data });

  it('are fine with the keys the runner reads, in either spelling', () => {
    expect(
      provisioningSecretErrors(vm, {
        cloudInit: secret({ userdata: 'eA==' }),
        sysprep: secret({ 'unattend.xml': 'eA==' }),
      }),
    ).toEqual([]);
  });

  it('name the field, the Secret and the keys (never the values) when something is missing', () => {
    expect(
      provisioningSecretErrors(vm, { cloudInit: null, sysprep: secret({ 'other.xml': 'c2VjcmV0' }) }),
    ).toEqual([
      'spec.cloudInit.secretRef: Secret "init" not found',
      'spec.sysprep.secretRef: Secret "answers" has none of the keys autounattend.xml, unattend.xml (it has: other.xml)',
    ]);
  });
});
