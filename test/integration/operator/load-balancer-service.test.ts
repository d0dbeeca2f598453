// spec.loadBalancerService against a real apiserver (kube-controller-manager included), with a
// manager process that enables Services for all VMs with default labels and annotations.
import { CoreV1Api, type V1Service } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { eventually } from '../../support/eventually.js';
import {
  createTestNamespace,
  isNotFound,
  kubectl,
  sharedKubeConfig,
  type TestNamespace,
} from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';

const kubeConfig = sharedKubeConfig();
const core = kubeConfig.makeApiClient(CoreV1Api);

describe('LoadBalancer Services of VMs (real apiserver, one manager, no node)', () => {
  let namespace: TestNamespace;
  let redis: RedisServer;
  let manager: ManagerProcess;
  const ns = () => namespace.name;
  /** `kubectl create`, then `replace`: a client-side apply would drop the null values (its patch deletes them). */
  const applyVm = async (name: string, loadBalancerService?: string, display = '{spice: {port: 5912}}') => {
    const manifest = `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${ns()}}
spec:
${loadBalancerService ? `  loadBalancerService: ${loadBalancerService}\n` : ''}  vm: {state: Stopped, maximumRam: 256Mi, display: ${display}}
`;
    await kubectl(['create', '-f', '-'], manifest).catch(() => kubectl(['replace', '-f', '-'], manifest));
  };
  /** The Service, or undefined when there is none (any other error fails the test). */
  const service = (name: string) =>
    core.readNamespacedService({ name, namespace: ns() }).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
  const serviceSoon = (name: string, check: (svc: V1Service) => void) =>
    eventually(async () => {
      const svc = await service(name);
      expect(svc).toBeDefined();
      check(svc!);
      return svc!;
    }, 30_000);
  const goneSoon = (name: string) =>
    eventually(async () => expect(await service(name)).toBeUndefined(), 30_000);

  beforeAll(async () => {
    await installCrds(kubeConfig);
    namespace = await createTestNamespace(kubeConfig, 'vmop-lb');
    redis = await startRedis();
    manager = startManagerProcess([
      ...['--kubeconfig', inject('kubeconfigPath'), '--redis', redis.url, '-n', ns()],
      '--load-balancer-service',
      ...['--load-balancer-service-labels', '{"team":"a","tier":"vm"}'],
      ...['--load-balancer-service-annotations', '{"lb.example.org/pool":"default"}'],
    ]);
    await manager.waitForLog((l) => l.msg === 'manager started');
  });

  afterAll(async () => {
    await manager?.stop();
    await redis?.stop();
    await namespace?.cleanup();
    expect(manager.logs.filter((l) => l.level >= 50)).toEqual([]);
  });

  it("the manager's default gives a SPICE VM a LoadBalancer Service for its port, selecting its runner pod, owned by it", async () => {
    await applyVm('by-default');
    const svc = await serviceSoon('by-default', () => undefined);
    expect(svc.spec).toMatchObject({
      type: 'LoadBalancer',
      ports: [{ name: 'spice', port: 5912, targetPort: 5912, protocol: 'TCP' }],
      selector: { 'app.kubernetes.io/name': 'vm-runner', 'app.kubernetes.io/instance': 'by-default' },
    });
    expect(svc.metadata?.labels).toMatchObject({
      team: 'a',
      tier: 'vm',
      'app.kubernetes.io/instance': 'by-default',
    });
    expect(svc.metadata?.annotations).toEqual({ 'lb.example.org/pool': 'default' });
    expect(svc.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'VirtualMachine', name: 'by-default' });
  });

  it("a VM's own labels and annotations are merged over the defaults, null removes one, and changes follow the spec", async () => {
    await applyVm('merged', '{labels: {team: b, tier: null}, annotations: {extra: "1"}}');
    await serviceSoon('merged', (svc) => {
      expect(svc.metadata?.labels?.team).toBe('b');
      expect(svc.metadata?.labels).not.toHaveProperty('tier');
      expect(svc.metadata?.annotations).toEqual({ 'lb.example.org/pool': 'default', extra: '1' });
    });
    await applyVm('merged', '{labels: {team: c}, annotations: {"lb.example.org/pool": null}}');
    await serviceSoon('merged', (svc) => {
      expect(svc.metadata?.labels).toMatchObject({ team: 'c', tier: 'vm' });
      expect(svc.metadata?.annotations ?? {}).toEqual({});
    });
  });

  it('{} opts a VM out (its Service is removed), and a VM without SPICE gets none', async () => {
    await applyVm('opted-out');
    await serviceSoon('opted-out', () => undefined);
    await applyVm('opted-out', '{}');
    await goneSoon('opted-out');
    await applyVm('no-spice', undefined, '{outputs: 1}');
    await serviceSoon('by-default', () => undefined); // the manager is at work
    await eventually(async () => {
      const vm = JSON.parse(await kubectl(['get', 'vm', 'no-spice', '-n', ns(), '-o', 'json']));
      expect(vm.status?.observedGeneration).toBe(vm.metadata.generation);
    }, 30_000);
    expect(await service('no-spice')).toBeUndefined();
  });

  it('a Service of the same name that vmop did not make is left alone, and the VM says so', async () => {
    const foreign = await core.createNamespacedService({
      namespace: ns(),
      body: { metadata: { name: 'foreign', labels: { owner: 'someone' } }, spec: { ports: [{ port: 80 }] } },
    });
    await applyVm('foreign', '{labels: {team: d}}'); // it wants a Service, of the name taken
    const vm = await eventually(async () => {
      const vm = JSON.parse(await kubectl(['get', 'vm', 'foreign', '-n', ns(), '-o', 'json']));
      expect(vm.status?.observedGeneration).toBe(vm.metadata.generation);
      expect(
        vm.status?.conditions?.find((c: { type: string }) => c.type === 'LoadBalancerServiceReady'),
      ).toMatchObject({
        status: 'False',
        reason: 'NameTaken',
        message: `the Service ${ns()}/foreign exists and was not made for this VM; vmop leaves it alone`,
      });
      return vm;
    }, 30_000);
    const after = await service('foreign');
    expect(after?.metadata?.resourceVersion).toBe(foreign.metadata?.resourceVersion); // untouched
    expect(after?.metadata?.ownerReferences).toBeUndefined();
    const events = JSON.parse(
      await kubectl([
        'get',
        'events',
        '-n',
        ns(),
        '--field-selector',
        `involvedObject.uid=${vm.metadata.uid}`,
        '-o',
        'json',
      ]),
    ).items;
    expect(events.map((e: { reason: string; count: number }) => [e.reason, e.count])).toContainEqual([
      'LoadBalancerServiceNameTaken',
      1,
    ]);
    await core.deleteNamespacedService({ name: 'foreign', namespace: ns() }); // the name is free again
    await serviceSoon('foreign', (svc) => expect(svc.metadata?.labels?.team).toBe('d'));
    await eventually(async () => {
      const vm = JSON.parse(await kubectl(['get', 'vm', 'foreign', '-n', ns(), '-o', 'json']));
      expect(
        vm.status?.conditions?.find((c: { type: string }) => c.type === 'LoadBalancerServiceReady'),
      ).toMatchObject({ status: 'True', reason: 'Applied' });
    }, 30_000);
  });
});
