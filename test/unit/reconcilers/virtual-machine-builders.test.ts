import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseRunnerConfig } from '../../../src/api/runner-config.js';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { desiredConfigMap } from '../../../src/reconcilers/virtual-machine/runner-config/config-map.js';
import {
  desiredRunnerConfig,
  renderRunnerConfig,
  validateRunnerConfig,
} from '../../../src/reconcilers/virtual-machine/runner-config/config.js';
import {
  desiredRunnerPod,
  type RunnerPodOptions,
} from '../../../src/reconcilers/virtual-machine/runner-pod/pod.js';
import { runnerClaims } from '../../../src/reconcilers/virtual-machine/disks/claims.js';
import {
  CLOUD_INIT_SECRET_DIR,
  SYSPREP_SECRET_DIR,
} from '../../../src/reconcilers/virtual-machine/naming.js';
import { provisioningSecretErrors } from '../../../src/reconcilers/virtual-machine/runner-config/provisioning-secrets.js';
import { hostNetworkErrors } from '../../../src/reconcilers/virtual-machine/runner-pod/host-network.js';
import { deriveStatus } from '../../../src/reconcilers/virtual-machine/status/derive.js';

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

/** The pod vmop makes for `vm`, with the claims it would make (none exist yet). */
const podOf = (vm: VirtualMachine, extra: Partial<RunnerPodOptions> = {}) =>
  desiredRunnerPod(vm, { name: vm.metadata.name, claims: runnerClaims(vm, []), ...options, ...extra });
const runnerOf = (vm: VirtualMachine, extra: Partial<RunnerPodOptions> = {}) =>
  podOf(vm, extra).spec!.containers[0]!;

describe('runner claims', () => {
  it("are VM-Operator's: <vm>-runner-data and <vm>-<disk>, with the three labels and the volume", () => {
    const claims = runnerClaims(vmFrom(), []);
    expect(claims.map((c) => [c.volume, c.claimName, c.exists, c.block])).toEqual([
      ['runner-data', 'test-vm-runner-data', false, false],
      ['system-disk', 'test-vm-system-disk', false, true],
    ]);
    const system = claims[1]!.desired;
    expect(system.metadata).toMatchObject({
      name: 'test-vm-system-disk',
      namespace: 'vmop-demo',
      labels: { ...labels, 'vmoperator.jdrupes.org/volume': 'system-disk' },
    });
    expect(system.metadata?.ownerReferences).toBeUndefined(); // deleting the VM keeps its disks
    expect(system.spec).toMatchObject({
      storageClassName: '',
      volumeMode: 'Block',
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: '40Gi' } },
      selector: { matchLabels: { 'vmrunner.jdrupes.org/disk': 'system' } },
    });
    expect(runnerClaims(vmFrom(), [], { runnerDataStorageClass: 'fast' })[0]!.desired.spec).toMatchObject({
      storageClassName: 'fast',
      volumeMode: 'Filesystem',
    });
  });

  it("use the StatefulSet's claims of vmop 0.1 (and VM-Operator < 3.4) when they exist", () => {
    const existing = ['runner-data-test-vm-0', 'system-disk-test-vm-0'].map((name) => ({
      metadata: { name, labels },
    }));
    expect(runnerClaims(vmFrom(), existing).map((c) => [c.claimName, c.exists])).toEqual([
      ['runner-data-test-vm-0', true],
      ['system-disk-test-vm-0', true],
    ]);
  });

  it('use the claim labelled for the volume (one a migration made), and never one being deleted', () => {
    const labelled = {
      metadata: {
        name: 'test-vm-system-disk-abcde',
        labels: { 'vmoperator.jdrupes.org/volume': 'system-disk' },
      },
    };
    const deleting = { metadata: { name: 'test-vm-runner-data', deletionTimestamp: new Date() } };
    expect(runnerClaims(vmFrom(), [labelled, deleting]).map((c) => [c.claimName, c.exists])).toEqual([
      ['test-vm-runner-data', false],
      ['test-vm-system-disk-abcde', true],
    ]);
  });

  it('name an unnamed disk disk-<index in the disk list>', () => {
    const vm = vmFrom((raw) => {
      raw.spec.vm.disks.push({
        volumeClaimTemplate: { spec: { resources: { requests: { storage: '1Gi' } } } },
      });
    });
    expect(runnerClaims(vm, []).map((c) => c.claimName)).toEqual([
      'test-vm-runner-data',
      'test-vm-system-disk',
      'test-vm-disk-2',
    ]);
  });
});

describe('desiredRunnerPod', () => {
  it('runs the runner with the config, its claims (disks as block devices) and the three labels, controlled by the VM', () => {
    const pod = podOf(vmFrom());
    expect(pod.metadata).toMatchObject({
      name: 'test-vm',
      namespace: 'vmop-demo',
      labels: { ...labels, 'app.kubernetes.io/component': 'vm-runner' },
    });
    expect(pod.metadata?.ownerReferences).toEqual([
      expect.objectContaining({
        kind: 'VirtualMachine',
        name: 'test-vm',
        uid: '0000-1111',
        controller: true,
      }),
    ]);
    const spec = pod.spec!;
    const runner = spec.containers[0]!;
    expect(runner.image).toBe('vmop/runner:test');
    expect(runner.volumeDevices).toEqual([{ name: 'system-disk', devicePath: '/dev/system-disk' }]);
    expect(spec.volumes).toEqual(
      expect.arrayContaining([
        { name: 'config', configMap: { name: 'test-vm' } },
        { name: 'runner-data', persistentVolumeClaim: { claimName: 'test-vm-runner-data' } },
        { name: 'system-disk', persistentVolumeClaim: { claimName: 'test-vm-system-disk' } },
      ]),
    );
    expect(runner.volumeMounts).toEqual(
      expect.arrayContaining([
        { name: 'config', mountPath: '/etc/opt/vmrunner', readOnly: true },
        { name: 'runner-data', mountPath: '/var/local/vm-data' },
      ]),
    );
    expect(spec.terminationGracePeriodSeconds).toBe(905); // powerdownTimeout 900 + 5
    expect(spec).toMatchObject({
      restartPolicy: 'Always',
      serviceAccountName: 'vm-runner',
      automountServiceAccountToken: false,
    });
  });

  it('is a Pod Security "restricted" pod on the pod network, unless the VM has a tap network', () => {
    const spec = podOf(vmFrom()).spec!;
    const runner = spec.containers[0]!;
    expect(spec.hostNetwork).toBeUndefined();
    expect(spec.dnsPolicy).toBeUndefined();
    expect(spec.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 65532,
      fsGroup: 65532,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(runner.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      // Its sockets are in /tmp: an emptyDir would hold `kubectl drain` up (--delete-emptydir-data).
      readOnlyRootFilesystem: false,
      capabilities: { drop: ['ALL'] },
    });
    expect(spec.volumes?.filter((volume) => volume.emptyDir)).toEqual([]);
    // VM-Operator's host bridge: the node's network, privileged (where an admin allows it: host-network.ts).
    const tap = podOf(vmFrom((raw) => (raw.spec.vm.networks = [{ tap: { bridge: 'br0' } }]))).spec!;
    expect(tap).toMatchObject({ hostNetwork: true, dnsPolicy: 'ClusterFirstWithHostNet' });
    expect(tap.securityContext).toBeUndefined();
    expect(tap.containers[0]!.securityContext).toEqual({ privileged: true });
  });

  it("serves the VM's metrics on a named port Prometheus finds (not on the host network, where VMs would share it)", () => {
    const pod = podOf(vmFrom());
    const runner = pod.spec!.containers[0]!;
    expect(runner.ports).toEqual([{ name: 'metrics', containerPort: 9110 }]);
    expect(runner.env).toEqual(
      expect.arrayContaining([
        { name: 'VMOP_METRICS_PORT', value: '9110' },
        { name: 'VMOP_NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
      ]),
    );
    expect(pod.metadata!.annotations).toMatchObject({
      'prometheus.io/scrape': 'true',
      'prometheus.io/port': '9110',
      'prometheus.io/path': '/metrics',
    });
    const tap = podOf(vmFrom((raw) => (raw.spec.vm.networks = [{ tap: { bridge: 'br0' } }])));
    expect(tap.spec!.containers[0]!.ports).toBeUndefined();
    expect(tap.spec!.containers[0]!.env?.map((env) => env.name)).not.toContain('VMOP_METRICS_PORT');
    expect(tap.metadata!.annotations?.['prometheus.io/scrape']).toBeUndefined();
  });

  it('is Ready only while the guest runs in it (the runner says so on its metrics port), so Services follow the guest', () => {
    const runner = podOf(vmFrom()).spec!.containers[0]!;
    expect(runner.readinessProbe).toMatchObject({
      httpGet: { path: '/readyz', port: 9110 },
      periodSeconds: 1,
    });
    const tap = podOf(vmFrom((raw) => (raw.spec.vm.networks = [{ tap: { bridge: 'br0' } }])));
    expect(tap.spec!.containers[0]!.readinessProbe).toBeUndefined();
  });

  it('asks for /dev/kvm by its limit when nodes give it', () => {
    expect(runnerOf(vmFrom(), { kvm: true }).resources?.limits).toEqual({
      'devices.vmop.jdrupes.org/kvm': '1',
    });
    const own = vmFrom((raw) => (raw.spec.resources = { limits: { memory: '9Gi' } }));
    expect(runnerOf(own, { kvm: true }).resources?.limits).toEqual({
      memory: '9Gi',
      'devices.vmop.jdrupes.org/kvm': '1',
    });
    expect(runnerOf(vmFrom()).resources?.limits).toBeUndefined();
  });

  it('refuses tap networks outside the namespaces an admin names', () => {
    const tap = vmFrom((raw) => (raw.spec.vm.networks = [{ user: {} }, { tap: { bridge: 'br0' } }]));
    expect(hostNetworkErrors(tap, [])).toEqual([
      expect.stringMatching(/^spec\.vm\.networks\[1\]\.tap: .*br0.*runner\.hostNetworkNamespaces/),
    ]);
    expect(hostNetworkErrors(tap, [tap.metadata.namespace!])).toEqual([]);
    expect(hostNetworkErrors(vmFrom(), [])).toEqual([]);
  });

  it('keeps the Redis URL in its Secret', () => {
    const runner = podOf(vmFrom()).spec!.containers[0]!;
    expect(runner.env).toContainEqual({
      name: 'VMOP_REDIS_URL',
      valueFrom: { secretKeyRef: { name: 'vm-runner-redis', key: 'url' } },
    });
  });

  it("carries the VM's own labels, so pod (anti-)affinity can name VMs; vmop's own keys win", () => {
    const vm = vmFrom((raw) => (raw.metadata.labels = { pair: 'db', 'app.kubernetes.io/name': 'mine' }));
    expect(podOf(vm).metadata?.labels).toEqual({
      pair: 'db',
      ...labels,
      'app.kubernetes.io/component': 'vm-runner',
    });
  });

  it("requests the VM's CPUs and RAM divided by the overcommit factors, plus the runner's overhead", () => {
    // currentCpus 2, currentRam 4Gi
    expect(runnerOf(vmFrom()).resources).toEqual({
      requests: { cpu: '1100m', memory: String(Math.floor((4 * 2 ** 30) / 1.25) + 192 * 2 ** 20) },
    });
    expect(runnerOf(vmFrom(), { overcommit: { cpu: 4, ram: 2 } }).resources).toEqual({
      requests: { cpu: '600m', memory: String(2 * 2 ** 30 + 192 * 2 ** 20) },
    });
    // Without currentCpus and currentRam: the maximums.
    const maximums = vmFrom((raw) => {
      delete raw.spec.vm.currentCpus;
      delete raw.spec.vm.currentRam;
    });
    expect(runnerOf(maximums).resources?.requests).toEqual({
      cpu: '2100m',
      memory: String(Math.floor((8 * 2 ** 30) / 1.25) + 192 * 2 ** 20),
    });
  });

  it("takes the VM's own resources when it has any", () => {
    const vm = vmFrom((raw) => (raw.spec.resources = { limits: { memory: '9Gi' }, requests: { cpu: 3 } }));
    expect(runnerOf(vm).resources).toEqual({ limits: { memory: '9Gi' }, requests: { cpu: '3' } });
    const empty = vmFrom((raw) => (raw.spec.resources = {}));
    expect(runnerOf(empty).resources?.requests).toEqual(expect.objectContaining({ cpu: '1100m' }));
  });

  it('mounts the image repository read-only when the namespace has one', () => {
    expect(podOf(vmFrom()).spec!.volumes?.map((v) => v.name)).not.toContain('vmop-image-repository');
    const pod = podOf(vmFrom(), { hasImageRepository: true }).spec!;
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
    expect(runnerOf(vmFrom(), withPolicy)).toMatchObject({
      image: 'vmop/runner:1',
      imagePullPolicy: 'Never',
    });
    const own = runnerOf(
      vmFrom((raw) => (raw.spec.image = { source: 'example/runner:2' })),
      withPolicy,
    );
    expect(own.image).toBe('example/runner:2');
    expect(own.imagePullPolicy).toBeUndefined();
    const parts = vmFrom(
      (raw) => (raw.spec.image = { repository: 'registry.example', path: 'runner', version: '2' }),
    );
    expect(runnerOf(parts).image).toBe('registry.example/runner:2');
  });

  it('mounts the display secret when one exists', () => {
    expect(podOf(vmFrom(), { displaySecretName: 'my-password' }).spec?.volumes).toContainEqual({
      name: 'display-secret',
      secret: { secretName: 'my-password' },
    });
  });

  it('mounts the cloud-init and sysprep Secrets as volumes, and the runner config names only their directories', () => {
    const vm = vmFrom((raw) => {
      raw.spec.cloudInit = { secretRef: { name: 'vm-cloud-init' }, metaData: { 'local-hostname': 'h' } };
      raw.spec.sysprep = { secretRef: { name: 'vm-answers' } };
    });
    const pod = podOf(vm).spec!;
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
});

describe('desiredConfigMap / runner config', () => {
  it("emulates (TCG) where nodes give no /dev/kvm, with QEMU's default CPU model for the default 'host' (which needs KVM)", () => {
    const emulated = desiredRunnerConfig(vmFrom(), { hasDisplaySecret: false, kvm: false })['/Runner'].vm;
    expect(emulated).toMatchObject({ accelerator: 'tcg', cpuModel: 'qemu64' });
    const withKvm = desiredRunnerConfig(vmFrom(), { hasDisplaySecret: false })['/Runner'].vm;
    expect(withKvm.accelerator).toBeUndefined();
    expect(withKvm.cpuModel).toBeUndefined(); // the runner's default: 'host'
    // A model the VM names is kept: TCG emulates named models.
    const named = vmFrom((raw) => {
      (raw.spec.vm as Record<string, unknown>).cpuModel = 'Skylake-Server';
    });
    expect(desiredRunnerConfig(named, { hasDisplaySecret: false, kvm: false })['/Runner'].vm.cpuModel).toBe(
      'Skylake-Server',
    );
  });

  it("passes a VNC display's port to the runner, and no VNC when the spec has none", () => {
    const withVnc = vmFrom((raw) => {
      (raw.spec.vm as Record<string, unknown>).display = { vnc: {} };
    });
    const display = (vm: typeof withVnc) =>
      desiredRunnerConfig(vm, { hasDisplaySecret: true })['/Runner'].vm.display;
    expect(display(withVnc)).toEqual({ outputs: 1, vnc: { port: 5901 } });
    expect(display(vmFrom())?.vnc).toBeUndefined();
  });

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
