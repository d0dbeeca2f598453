import { AppsV1Api, CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse } from 'yaml';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { eventually } from '../../support/eventually.js';
import { isNotFound, kubectl, sharedKubeConfig } from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';

const NAMESPACE = 'vmop-demo'; // the namespace VM-Operator's example names
const VM = 'test-vm';
const kubeConfig = sharedKubeConfig();
const apps = kubeConfig.makeApiClient(AppsV1Api);
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
const readSts = () => apps.readNamespacedStatefulSet({ name: VM, namespace: NAMESPACE });
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

  it("turns VM-Operator's example, applied unchanged, into a StatefulSet, a ConfigMap and the disk PVC", async () => {
    await kubectl(['apply', '-f', 'examples/local-path-test-vm.yaml']);
    const sts = await eventually(readSts);
    expect(sts.spec?.replicas).toBe(1);
    expect(sts.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'VirtualMachine', name: VM });
    const config = await eventually(runnerConfig);
    expect(config.vm).toMatchObject({ name: VM, currentCpus: 2, maximumCpus: 4, currentRam: '4Gi' });
    const pvc = await eventually(() =>
      core.readNamespacedPersistentVolumeClaim({ name: 'system-disk-test-vm-0', namespace: NAMESPACE }),
    );
    expect(pvc.metadata?.labels).toMatchObject({
      'app.kubernetes.io/name': 'vm-runner',
      'app.kubernetes.io/instance': VM,
      'app.kubernetes.io/managed-by': 'vm-operator',
    });
    const vm = await eventually(async () => {
      const current = await readVm();
      expect(current.status?.phase).toBe('Pending'); // no scheduler here: the runner pod waits for a node
      return current;
    });
    expect(vm.status.observedGeneration).toBe(vm.metadata.generation);
    // The runner's Redis credential: one Secret for the namespace, named by the pod's env.
    const env = sts.spec?.template.spec?.containers.find((c) => c.name === 'runner')?.env ?? [];
    expect(env.find((e) => e.valueFrom?.secretKeyRef)?.valueFrom?.secretKeyRef).toEqual({
      name: 'vm-runner-redis',
      key: 'url',
    });
    const secret = await core.readNamespacedSecret({ name: 'vm-runner-redis', namespace: NAMESPACE });
    expect(Buffer.from(secret.data!.url!, 'base64').toString()).toBe(redis.url);
    expect(secret.metadata?.ownerReferences).toBeUndefined();
  });

  it("locks a SPICE VM's console with a generated display Secret, and prefers the user's own", async () => {
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
    const mounted = async () =>
      (await readSts()).spec?.template.spec?.volumes?.find((v) => v.name === 'display-secret')?.secret
        ?.secretName;
    await eventually(async () => expect(await mounted()).toBe(`${VM}-display-secret`));
    expect((await runnerConfig()).displaySecretDir).toBeDefined();

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
    await eventually(async () => expect(await mounted()).toBe('my-console'));
    await kubectl(['delete', 'secret', '-n', NAMESPACE, 'my-console']);
    await eventually(async () => expect(await mounted()).toBe(`${VM}-display-secret`));
  });

  it('generates no display Secret for a VM created stopped, until it is started', async () => {
    const name = 'created-stopped';
    const sts = () => apps.readNamespacedStatefulSet({ name, namespace: NAMESPACE });
    const displaySecret = () =>
      core.readNamespacedSecret({ name: `${name}-display-secret`, namespace: NAMESPACE });
    const mounted = async () =>
      (await sts()).spec?.template.spec?.volumes?.find((v) => v.name === 'display-secret')?.secret
        ?.secretName;
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
    expect((await sts()).spec?.replicas).toBe(0);
    expect(await mounted()).toBeUndefined();
    await expect(displaySecret()).rejects.toSatisfy(isNotFound);

    await setState('Running');
    await eventually(async () => expect(await mounted()).toBe(`${name}-display-secret`));
    expect((await sts()).spec?.replicas).toBe(1);
    const password = (await displaySecret()).data!['display-password'];
    // Stopped again, it keeps its Secret (and its password).
    await setState('Stopped');
    await eventually(async () => expect((await sts()).spec?.replicas).toBe(0));
    expect(await mounted()).toBe(`${name}-display-secret`);
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
  });

  it('flips the StatefulSet between one and zero replicas with the VM state', async () => {
    await patchVm({ state: 'Stopped' });
    await eventually(async () => expect((await readSts()).spec?.replicas).toBe(0));
    await patchVm({ state: 'Running' });
    await eventually(async () => expect((await readSts()).spec?.replicas).toBe(1));
  });

  it("applies currentRam through the ConfigMap; the StatefulSet only changes the next pod's requests", async () => {
    const podUid = (await eventually(() => core.readNamespacedPod({ name: `${VM}-0`, namespace: NAMESPACE })))
      .metadata?.uid;
    const since = Date.now();
    await patchVm({ currentRam: '6Gi' });
    await eventually(async () => expect((await runnerConfig()).vm.currentRam).toBe('6Gi'));
    await reconciledAfter(since);
    // The reconcile writes the ConfigMap first, the StatefulSet right after.
    const sts = await eventually(async () => {
      const current = await readSts();
      // 6Gi / 1.25 (VM-Operator's RAM overcommit) plus the runner's own 192Mi.
      expect(current.spec?.template.spec?.containers[0]?.resources?.requests?.memory).toBe(
        String(Math.floor((6 * 2 ** 30) / 1.25) + 192 * 2 ** 20),
      );
      return current;
    });
    expect(sts.spec?.updateStrategy?.type).toBe('OnDelete');
    // OnDelete: the pod that runs (here: waits for a node) is never replaced for it.
    const pod = await core.readNamespacedPod({ name: `${VM}-0`, namespace: NAMESPACE });
    expect(pod.metadata?.uid).toBe(podUid);
    // kube-controller-manager writes the StatefulSet's status after the change: let it settle
    // (unchanged for a second), so the next test starts from a quiet StatefulSet.
    await eventually(async () => {
      const current = await readSts();
      expect(current.status?.observedGeneration).toBe(current.metadata?.generation);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect((await readSts()).metadata?.resourceVersion).toBe(current.metadata?.resourceVersion);
    });
  });

  it('reports a spec the runner cannot use in a condition and leaves the owned objects alone', async () => {
    const before = {
      sts: (await readSts()).metadata?.resourceVersion,
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
    expect((await readSts()).metadata?.resourceVersion).toBe(before.sts);
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
    // The CRD takes any map; the apiserver refuses the StatefulSet with a label key like this.
    await patchSpec({ nodeSelector: { 'not a label key!': 'x' } });
    const condition = await eventually(async () => {
      const found = (await readVm()).status?.conditions?.find(
        (c: { type: string }) => c.type === 'SpecValid',
      );
      expect(found).toMatchObject({ status: 'False', reason: 'RejectedByApiserver' });
      return found;
    });
    expect(condition.message).toMatch(/StatefulSet.*is invalid.*nodeSelector/);
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
  });

  it('deleting the VM garbage-collects StatefulSet and ConfigMap and keeps the disk PVC', async () => {
    await kubectl(['delete', 'vm', '-n', NAMESPACE, VM, '--wait=true']);
    await eventually(async () => {
      await expect(readSts()).rejects.toSatisfy(isNotFound);
      await expect(readConfigMap()).rejects.toSatisfy(isNotFound);
    });
    const pvc = await core.readNamespacedPersistentVolumeClaim({
      name: 'system-disk-test-vm-0',
      namespace: NAMESPACE,
    });
    expect(pvc.metadata?.deletionTimestamp).toBeUndefined();
  });
});
