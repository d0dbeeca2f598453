import { CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse } from 'yaml';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { eventually } from '../../support/eventually.js';
import { isNotFound, kubectl, sharedKubeConfig } from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';
import {
  alertRules,
  dashboardQueries,
  exports,
  OVERVIEW_DASHBOARD,
  seriesOf,
} from '../../support/monitoring.js';

const NAMESPACE = 'vmop-demo'; // the namespace VM-Operator's example names
const VM = 'test-vm';
const kubeConfig = sharedKubeConfig();
const core = kubeConfig.makeApiClient(CoreV1Api);
const custom = kubeConfig.makeApiClient(CustomObjectsApi);
const vmRef = {
  group: 'vmoperator.jdrupes.org',
  version: 'v1',
  plural: 'vms',
  namespace: NAMESPACE,
  name: VM,
};

const readVm = () => custom.getNamespacedCustomObject(vmRef);
const patchVm = (vm: Record<string, unknown>) =>
  kubectl(['patch', 'vm', '-n', NAMESPACE, VM, '--type', 'merge', '-p', JSON.stringify({ spec: { vm } })]);
/** The VM's runner pod, named after it (no node here: it waits for one). */
const readPod = (name = VM) => core.readNamespacedPod({ name, namespace: NAMESPACE });
const mountedSecret = async (name = VM) =>
  (await readPod(name)).spec?.volumes?.find((v) => v.name === 'display-secret')?.secret?.secretName;
const podGone = (name = VM) => eventually(() => expect(readPod(name)).rejects.toSatisfy(isNotFound));
const readConfigMap = () => core.readNamespacedConfigMap({ name: VM, namespace: NAMESPACE });
const runnerConfig = async () => parse((await readConfigMap()).data!['config.yaml']!)['/Runner'];

describe('VirtualMachine controller (one manager process, real apiserver and Redis)', () => {
  let redis: RedisServer;
  let manager: ManagerProcess;

  /** Resolves once the manager finished a reconcile of the VM that started after `since`. */
  const reconciledAfter = (since: number) =>
    manager.waitForLog(
      (l) => l.msg === 'reconcile end' && l.key === `vm:${NAMESPACE}/${VM}` && l.time > since,
    );

  beforeAll(async () => {
    await installCrds(kubeConfig);
    await kubectl(['apply', '-f', '-'], `apiVersion: v1\nkind: Namespace\nmetadata: {name: ${NAMESPACE}}\n`);
    redis = await startRedis();
    manager = startManagerProcess([
      '--kubeconfig',
      inject('kubeconfigPath'),
      '--redis',
      redis.url,
      '-n',
      NAMESPACE,
    ]);
    await manager.waitForLog((l) => l.msg === 'manager started');
  });

  afterAll(async () => {
    await manager?.stop();
    await redis?.stop();
    expect(manager.logs.filter((l) => l.level >= 50)).toEqual([]);
  });

  it("turns VM-Operator's example, applied unchanged, into a runner pod, a ConfigMap and the claims", async () => {
    await kubectl(['apply', '-f', 'examples/local-path-test-vm.yaml']);
    const pod = await eventually(() => readPod());
    expect(pod.metadata?.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'VirtualMachine', name: VM, controller: true }),
    ]);
    const config = await eventually(runnerConfig);
    expect(config.vm).toMatchObject({ name: VM, currentCpus: 2, maximumCpus: 4, currentRam: '4Gi' });
    for (const claim of ['test-vm-system-disk', 'test-vm-runner-data']) {
      const pvc = await core.readNamespacedPersistentVolumeClaim({ name: claim, namespace: NAMESPACE });
      expect(pvc.metadata?.labels).toMatchObject({
        'app.kubernetes.io/name': 'vm-runner',
        'app.kubernetes.io/instance': VM,
        'app.kubernetes.io/managed-by': 'vm-operator',
      });
      expect(pod.spec?.volumes).toContainEqual(
        expect.objectContaining({ persistentVolumeClaim: { claimName: claim } }),
      );
    }
    const vm = await eventually(async () => {
      const current = await readVm();
      expect(current.status?.phase).toBe('Pending'); // no node here: the runner pod waits for one
      expect(current.status?.runnerPod).toEqual({
        name: VM,
        uid: pod.metadata?.uid,
        image: pod.spec?.containers[0]?.image, // the manager's default: not outdated
      });
      return current;
    });
    expect(vm.status.observedGeneration).toBe(vm.metadata.generation);
    // The runner's Redis credential: one Secret for the namespace, named by the pod's env.
    const env = pod.spec?.containers.find((c) => c.name === 'runner')?.env ?? [];
    expect(env.find((e) => e.valueFrom?.secretKeyRef)?.valueFrom?.secretKeyRef).toEqual({
      name: 'vm-runner-redis',
      key: 'url',
    });
    const secret = await core.readNamespacedSecret({ name: 'vm-runner-redis', namespace: NAMESPACE });
    expect(Buffer.from(secret.data!.url!, 'base64').toString()).toBe(redis.url);
    expect(secret.metadata?.ownerReferences).toBeUndefined();
  });

  it("locks a SPICE VM's console with a generated display Secret, and prefers the user's own (from the next pod on)", async () => {
    const generated = await eventually(() =>
      core.readNamespacedSecret({ name: `${VM}-display-secret`, namespace: NAMESPACE }),
    );
    expect(generated.metadata?.labels).toMatchObject({
      'app.kubernetes.io/component': 'display-secret',
      'app.kubernetes.io/instance': VM,
    });
    expect(generated.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'VirtualMachine', name: VM });
    const text = (key: string) => Buffer.from(generated.data![key]!, 'base64').toString();
    expect(text('password-expiry')).toBe('now');
    expect(text('display-password').length).toBeGreaterThanOrEqual(16);
    await eventually(async () => expect(await mountedSecret()).toBe(`${VM}-display-secret`));
    expect((await runnerConfig()).displaySecretDir).toBeDefined();
    /** A new pod, as a Restart makes one (a pod that waits for a node goes at once). */
    const newPod = async () => {
      const before = (await readPod()).metadata?.uid;
      await core.deleteNamespacedPod({ name: VM, namespace: NAMESPACE });
      await eventually(async () => expect((await readPod()).metadata?.uid).not.toBe(before));
    };

    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: v1
kind: Secret
metadata:
  name: my-console
  namespace: ${NAMESPACE}
  labels: {app.kubernetes.io/name: vm-runner, app.kubernetes.io/component: display-secret, app.kubernetes.io/instance: ${VM}}
stringData: {display-password: mine}
`,
    );
    // A running pod never changes: the next one mounts it.
    await newPod();
    expect(await mountedSecret()).toBe('my-console');
    await kubectl(['delete', 'secret', '-n', NAMESPACE, 'my-console']);
    await newPod();
    expect(await mountedSecret()).toBe(`${VM}-display-secret`);
  });

  it('generates no display Secret for a VM created stopped, until it is started', async () => {
    const name = 'created-stopped';
    const displaySecret = () =>
      core.readNamespacedSecret({ name: `${name}-display-secret`, namespace: NAMESPACE });
    const setState = (state: string) =>
      kubectl([
        'patch',
        'vm',
        '-n',
        NAMESPACE,
        name,
        '--type',
        'merge',
        '-p',
        JSON.stringify({ spec: { vm: { state } } }),
      ]);
    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${NAMESPACE}}
spec: {vm: {state: Stopped, maximumCpus: 2, maximumRam: 256Mi, display: {spice: {port: 5912}}}}
`,
    );
    await eventually(async () => {
      const vm = await custom.getNamespacedCustomObject({ ...vmRef, name });
      expect(vm.status?.observedGeneration).toBe(vm.metadata.generation);
    });
    await expect(readPod(name)).rejects.toSatisfy(isNotFound);
    await expect(displaySecret()).rejects.toSatisfy(isNotFound);

    await setState('Running');
    await eventually(async () => expect(await mountedSecret(name)).toBe(`${name}-display-secret`));
    const password = (await displaySecret()).data!['display-password'];
    // Stopped again, its pod goes and it keeps its Secret (and its password).
    await setState('Stopped');
    await podGone(name);
    expect((await displaySecret()).data!['display-password']).toBe(password);
    await kubectl(['delete', 'vm', '-n', NAMESPACE, name]);
  });

  it('serves /healthz, /readyz and Prometheus /metrics', async () => {
    const port = (await manager.waitForLog((l) => l.msg === 'manager started')).metricsPort as number;
    const get = (path: string) => fetch(`http://127.0.0.1:${port}${path}`);
    expect((await get('/healthz')).status).toBe(200);
    expect((await get('/readyz')).status).toBe(200);
    const metrics = await (await get('/metrics')).text();
    expect(metrics).toMatch(/^vmop_queue_handler_duration_seconds_count\{[^}]*\} [1-9]/m);
    expect(metrics).toContain('vmop_queue_enqueue_to_start_seconds_bucket');
    // The VMs as the alerts read them: this one should run and cannot (no node here).
    expect(metrics).toMatch(
      new RegExp(`^vmop_vm_phase_count\\{phase="Pending",node="",run_policy=""\\} [1-9]`, 'm'),
    );
    expect(metrics).toMatch(
      new RegExp(
        `^vmop_vm_not_running_seconds\\{namespace="${NAMESPACE}",name="${VM}",phase="Pending"\\} \\d`,
        'm',
      ),
    );
    expect(metrics).toMatch(/^vmop_queue_redis_up 1$/m);
    // Every series the chart's alerts and dashboard read is one the managers export.
    for (const { name, expr } of [
      ...alertRules.map((rule) => ({ name: rule.alert, expr: rule.expr })),
      ...dashboardQueries(OVERVIEW_DASHBOARD).map((query) => ({ name: query.panel, expr: query.expr })),
    ])
      for (const series of seriesOf(expr)) expect(exports(metrics, series), `${name}: ${series}`).toBe(true);
  });

  it('deletes the runner pod when the VM is stopped, and makes one when it is to run', async () => {
    await patchVm({ state: 'Stopped' });
    await podGone();
    const stopped = await eventually(async () => {
      const vm = await readVm();
      expect(vm.status?.phase).toBe('Stopped');
      return vm;
    });
    expect(stopped.status?.runnerPod).toBeUndefined();
    await patchVm({ state: 'Running' });
    const pod = await eventually(() => readPod());
    await eventually(async () =>
      expect((await readVm()).status?.runnerPod).toMatchObject({ name: VM, uid: pod.metadata?.uid }),
    );
  });

  it('applies currentRam through the ConfigMap; the pod is not replaced, the next one requests the new RAM', async () => {
    const podUid = (await eventually(() => readPod())).metadata?.uid;
    const since = Date.now();
    await patchVm({ currentRam: '6Gi' });
    await eventually(async () => expect((await runnerConfig()).vm.currentRam).toBe('6Gi'));
    await reconciledAfter(since);
    const pod = await readPod();
    expect(pod.metadata?.uid).toBe(podUid);
    await core.deleteNamespacedPod({ name: VM, namespace: NAMESPACE });
    const next = await eventually(async () => {
      const current = await readPod();
      expect(current.metadata?.uid).not.toBe(podUid);
      return current;
    });
    // 6Gi / 1.25 (VM-Operator's RAM overcommit) plus the runner's own 192Mi.
    expect(next.spec?.containers[0]?.resources?.requests?.memory).toBe(
      String(Math.floor((6 * 2 ** 30) / 1.25) + 192 * 2 ** 20),
    );
  });

  it('reports a spec the runner cannot use in a condition and leaves the owned objects alone', async () => {
    // What vmop writes of the pod (the scheduler writes its status in its own time: CI saw the
    // resourceVersion move by two meanwhile), and the ConfigMap, which only vmop writes.
    const vmopsPart = async () => {
      const { metadata, spec } = await readPod();
      return JSON.stringify({
        uid: metadata?.uid,
        labels: metadata?.labels,
        annotations: metadata?.annotations,
        spec,
      });
    };
    const before = {
      pod: await vmopsPart(),
      cm: (await readConfigMap()).metadata?.resourceVersion,
    };
    // A valid Kubernetes quantity, but not a RAM size the runner understands.
    await patchVm({ currentRam: '5e9' });
    const condition = await eventually(async () => {
      const found = (await readVm()).status?.conditions?.find(
        (c: { type: string }) => c.type === 'SpecValid',
      );
      expect(found?.status).toBe('False');
      return found;
    });
    expect(condition.message).toMatch(/vm\.currentRam/);
    expect(await vmopsPart()).toBe(before.pod);
    expect((await readConfigMap()).metadata?.resourceVersion).toBe(before.cm);
    await patchVm({ currentRam: '4Gi' });
    await eventually(async () => {
      const found = (await readVm()).status?.conditions?.find(
        (c: { type: string }) => c.type === 'SpecValid',
      );
      expect(found?.status).toBe('True');
    });
  });

  it("ends a write the apiserver refuses for good as a terminal failure, with the apiserver's message in status and an Event", async () => {
    const since = Date.now();
    const patchSpec = (spec: Record<string, unknown>) =>
      kubectl(['patch', 'vm', '-n', NAMESPACE, VM, '--type', 'merge', '-p', JSON.stringify({ spec })]);
    // The CRD takes any map; the apiserver refuses a pod with a label key like this. The running
    // pod is not changed: the next one is refused.
    await patchSpec({ nodeSelector: { 'not a label key!': 'x' } });
    await core.deleteNamespacedPod({ name: VM, namespace: NAMESPACE });
    const condition = await eventually(async () => {
      const found = (await readVm()).status?.conditions?.find(
        (c: { type: string }) => c.type === 'SpecValid',
      );
      expect(found).toMatchObject({ status: 'False', reason: 'RejectedByApiserver' });
      return found;
    });
    expect(condition.message).toMatch(/Pod.*is invalid.*nodeSelector/);
    const failures = () =>
      manager.logs.filter(
        (l) => l.msg === 'handler failed' && l.key === `vm:${NAMESPACE}/${VM}` && l.time > since,
      );
    await eventually(async () => expect(failures().length).toBeGreaterThan(0));
    expect(failures().every((l) => l.terminal === true)).toBe(true);
    const events = await core.listNamespacedEvent({
      namespace: NAMESPACE,
      fieldSelector: `involvedObject.name=${VM},reason=RejectedByApiserver`,
    });
    expect(events.items).toHaveLength(1);
    expect(events.items[0]?.message).toContain('nodeSelector');

    await patchSpec({ nodeSelector: null });
    await eventually(async () => {
      const found = (await readVm()).status?.conditions?.find(
        (c: { type: string }) => c.type === 'SpecValid',
      );
      expect(found?.status).toBe('True');
    });
    await eventually(() => readPod()); // the fixed spec's pod is made
  });

  it('makes a runner pod only once its claims of an Immediate StorageClass are bound, saying what it waits for', async () => {
    // No provisioner serves this class: the claim binds when a volume is made for it by hand.
    const className = 'vmop-test-immediate';
    const name = 'bound-first';
    const claimName = `${name}-data-disk`;
    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: ${className}}
provisioner: example.com/nobody
volumeBindingMode: Immediate
---
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${NAMESPACE}}
spec:
  vm:
    state: Running
    maximumRam: 256Mi
    disks:
    - volumeClaimTemplate:
        metadata: {name: data}
        spec: {storageClassName: ${className}, resources: {requests: {storage: 1Mi}}}
`,
    );
    const vmOf = () => custom.getNamespacedCustomObject({ ...vmRef, name });
    const running = (vm: { status?: { conditions?: Array<{ type: string }> } }) =>
      vm.status?.conditions?.find((c) => c.type === 'Running');
    await eventually(async () => {
      const vm = await vmOf();
      expect(vm.status?.phase).toBe('Pending');
      expect(running(vm)).toMatchObject({
        reason: 'WaitingForVolumeBinding',
        message: `the runner pod waits for its claims to be bound: ${claimName} (waiting for StorageClass ${className} to provide a volume)`,
      });
    });
    await expect(readPod(name)).rejects.toSatisfy(isNotFound);
    // The claim binds: the pod is made, and the scheduler never saw it with an unbound claim.
    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: v1
kind: PersistentVolume
metadata: {name: ${claimName}}
spec:
  storageClassName: ${className}
  capacity: {storage: 1Mi}
  accessModes: [ReadWriteOnce]
  volumeMode: Block
  claimRef: {namespace: ${NAMESPACE}, name: ${claimName}}
  hostPath: {path: /dev/null}
`,
    );
    const pod = await eventually(() => readPod(name), 30_000);
    expect(pod.spec?.volumes).toContainEqual(
      expect.objectContaining({ persistentVolumeClaim: { claimName } }),
    );
    await kubectl(['delete', 'vm', '-n', NAMESPACE, name, '--wait']);
    await kubectl(['delete', 'pvc', '-n', NAMESPACE, claimName, `${name}-runner-data`, '--wait=false']);
    await kubectl(['delete', 'pv', claimName, '--wait=false']);
    await kubectl(['delete', 'storageclass', className]);
  });

  it('deleting the VM garbage-collects its pod and ConfigMap and keeps its claims', async () => {
    await kubectl(['delete', 'vm', '-n', NAMESPACE, VM, '--wait=true']);
    await eventually(async () => {
      await expect(readPod()).rejects.toSatisfy(isNotFound);
      await expect(readConfigMap()).rejects.toSatisfy(isNotFound);
    });
    for (const name of ['test-vm-system-disk', 'test-vm-runner-data']) {
      const pvc = await core.readNamespacedPersistentVolumeClaim({ name, namespace: NAMESPACE });
      expect(pvc.metadata?.deletionTimestamp).toBeUndefined();
    }
  });
});
