// The watch edge against a real apiserver: its caches hold what reconciles read (trimmed of
// managedFields), and a change to a VM's status alone enqueues no VM reconcile, while every other
// change does. One watch stream delivers a VM's changes in order, so "no key between these two
// changes" is a sure observation, not a timing one.
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GROUP, KIND, PLURAL, VERSION } from '../../../src/api/virtual-machine.js';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { createWatchEdge, type WatchEdge, type WatchEventSummary } from '../../../src/operator/watch-edge.js';
import { createLogger } from '../../../src/util/logger.js';
import { isSubset } from '../../../src/kube/subset.js';
import {
  desiredRunnerSecret,
  desiredRunnerServiceAccount,
  RUNNER_SECRET,
  RUNNER_SERVICE_ACCOUNT,
} from '../../../src/reconcilers/virtual-machine/runner-config/identity.js';
import { eventually } from '../../support/eventually.js';
import { createTestNamespace, kubectl, sharedKubeConfig, type TestNamespace } from '../../support/kube.js';

const kubeConfig = sharedKubeConfig();
const customObjects = kubeConfig.makeApiClient(CustomObjectsApi);
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

describe('watch edge (real apiserver)', () => {
  let namespace: TestNamespace;
  let edge: WatchEdge;
  const enqueued: Array<{ key: string; event: WatchEventSummary }> = [];
  const ns = () => namespace.name;
  const vmRef = (name: string) => ({ group: GROUP, version: VERSION, plural: PLURAL, namespace: ns(), name });
  const keysFor = (name: string) => enqueued.filter((e) => e.event.kind === KIND && e.event.name === name);

  beforeAll(async () => {
    await installCrds(kubeConfig);
    namespace = await createTestNamespace(kubeConfig, 'vmop-watch-edge');
    const logger = createLogger('test', {});
    edge = createWatchEdge(
      kubeConfig,
      [ns()],
      async (key, event) => void enqueued.push({ key, event }),
      logger,
    );
    await edge.start();
  });
  afterAll(async () => {
    await edge?.stop();
    await namespace?.cleanup();
  });

  it('a status-only change enqueues no VM reconcile; a spec or annotation change does', async () => {
    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: quiet, namespace: ${ns()}}
spec:
  vm: {state: Stopped, maximumRam: 256Mi}
`,
    );
    await eventually(() => expect(keysFor('quiet').length).toBe(1));
    const cached = edge.cache.get(KIND, ns(), 'quiet');
    expect(cached?.metadata?.generation).toBe(1);
    expect(cached?.metadata?.managedFields).toBeUndefined(); // trimmed: nobody reads it
    expect(
      cached?.metadata?.annotations?.['kubectl.kubernetes.io/last-applied-configuration'],
    ).toBeUndefined();

    await customObjects.patchNamespacedCustomObjectStatus(
      { ...vmRef('quiet'), body: { status: { phase: 'Stopped' } } },
      mergePatch,
    );
    const annotated = (await customObjects.patchNamespacedCustomObject(
      { ...vmRef('quiet'), body: { metadata: { annotations: { note: 'a' } } } },
      mergePatch,
    )) as { metadata: { resourceVersion: string } };
    await eventually(() =>
      expect(keysFor('quiet').map((e) => e.event.resourceVersion)).toContain(
        annotated.metadata.resourceVersion,
      ),
    );
    // The status write came before the annotation in the same watch stream, and enqueued nothing.
    expect(keysFor('quiet').map((e) => e.key)).toEqual([`vm:${ns()}/quiet`, `vm:${ns()}/quiet`]);
    expect((edge.cache.get(KIND, ns(), 'quiet') as { status?: { phase?: string } }).status?.phase).toBe(
      'Stopped',
    );

    await customObjects.patchNamespacedCustomObject(
      { ...vmRef('quiet'), body: { spec: { vm: { currentCpus: 1 } } } },
      mergePatch,
    );
    await eventually(() => expect(keysFor('quiet').length).toBe(3));
    expect(keysFor('quiet')[2]!.event.generation).toBe(2);
  });

  it("a status-only change of a VM with an operation in flight still enqueues the operation's key", async () => {
    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: busy, namespace: ${ns()}, annotations: {vmoperator.jdrupes.org/operation: busy-start}}
spec:
  vm: {state: Stopped, maximumRam: 256Mi}
`,
    );
    await eventually(() =>
      expect(keysFor('busy').map((e) => e.key)).toEqual([`vm:${ns()}/busy`, `vmop:${ns()}/busy-start`]),
    );
    await customObjects.patchNamespacedCustomObjectStatus(
      { ...vmRef('busy'), body: { status: { phase: 'Running' } } },
      mergePatch,
    );
    await eventually(() =>
      expect(
        keysFor('busy')
          .map((e) => e.key)
          .slice(2),
      ).toEqual([`vmop:${ns()}/busy-start`]),
    );
  });

  it("a StorageClass's allowVolumeExpansion change enqueues the VMs with claims of it; other changes do not", async () => {
    const className = `${ns()}-expandable`;
    const ofClass = () =>
      enqueued.filter((e) => e.event.kind === 'StorageClass' && e.event.name === className);
    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: ${className}}
provisioner: example.com/none
allowVolumeExpansion: false
`,
    );
    try {
      await eventually(() => expect(edge.cache.get('StorageClass', '', className)).toBeDefined());
      await kubectl(
        ['apply', '-f', '-'],
        `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: disky-data-disk
  namespace: ${ns()}
  labels: {app.kubernetes.io/name: vm-runner, app.kubernetes.io/instance: disky, app.kubernetes.io/managed-by: vm-operator}
spec:
  storageClassName: ${className}
  accessModes: [ReadWriteOnce]
  volumeMode: Block
  resources: {requests: {storage: 16Mi}}
`,
      );
      await eventually(() =>
        expect(edge.cache.get('PersistentVolumeClaim', ns(), 'disky-data-disk')).toBeDefined(),
      );
      await kubectl(['label', 'storageclass', className, 'note=a']);
      const allowed = await kubectl([
        'patch',
        'storageclass',
        className,
        '-p',
        '{"allowVolumeExpansion":true}',
        '-o',
        'jsonpath={.metadata.resourceVersion}',
      ]);
      await eventually(() => expect(ofClass().map((e) => e.event.resourceVersion)).toContain(allowed.trim()));
      // The label came first in the same watch stream, and enqueued nothing.
      expect(ofClass().map((e) => e.key)).toEqual([`vm:${ns()}/disky`]);
    } finally {
      await kubectl(['delete', 'storageclass', className]);
    }
  });

  it('caches the objects that belong to VMs, and lists them by label', async () => {
    await kubectl(
      ['create', '-f', '-'],
      `apiVersion: v1
kind: Secret
metadata:
  name: quiet-display
  namespace: ${ns()}
  labels: {app.kubernetes.io/name: vm-runner, app.kubernetes.io/component: display-secret, app.kubernetes.io/instance: quiet, padding: x}
  annotations: {padding: ${'y'.repeat(100_000)}}
stringData: {display-password: x, padding: ${'z'.repeat(500_000)}}
---
apiVersion: v1
kind: Secret
metadata: {name: unrelated, namespace: ${ns()}}
stringData: {a: b}
---
apiVersion: v1
kind: Secret
metadata:
  name: labelled-like-vmops
  namespace: ${ns()}
  labels: {app.kubernetes.io/name: vm-runner, app.kubernetes.io/instance: quiet}
stringData: {padding: ${'z'.repeat(500_000)}}
`,
    );
    await eventually(() =>
      expect(
        edge.cache
          .list('Secret', ns(), {
            'app.kubernetes.io/component': 'display-secret',
            'app.kubernetes.io/instance': 'quiet',
          })
          .map((s) => s.metadata?.name),
      ).toEqual(['quiet-display']),
    );
    expect(edge.cache.get('Secret', ns(), 'unrelated')).toBeUndefined(); // not vmop's: not watched
    // A person's display Secret is held by name, version and the labels it is found by: whatever
    // a tenant puts in it costs the manager nothing (issue 53); other labelled Secrets not at all.
    const cached = edge.cache.get('Secret', ns(), 'quiet-display')!;
    expect(cached.metadata?.labels).toEqual({
      'app.kubernetes.io/name': 'vm-runner',
      'app.kubernetes.io/component': 'display-secret',
      'app.kubernetes.io/instance': 'quiet',
    });
    expect(JSON.stringify(cached).length).toBeLessThan(1_000);
    expect(edge.cache.get('Secret', ns(), 'labelled-like-vmops')).toBeUndefined();
  });

  it('caches what it listed at start as what it was told by the watch: a restarted manager finds its runner Secret and ServiceAccount as it wrote them', async () => {
    const secret = desiredRunnerSecret(ns(), {
      runner: 'redis://vmop-runner:secret@redis:6379',
      importer: 'redis://vmop-importer:secret@redis:6379',
    });
    const account = desiredRunnerServiceAccount(ns());
    await kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [secret, account] }),
    );
    const restarted = createWatchEdge(kubeConfig, [ns()], async () => undefined, createLogger('test', {}));
    await restarted.start();
    try {
      const cached = {
        secret: restarted.cache.get('Secret', ns(), RUNNER_SECRET),
        account: restarted.cache.get('ServiceAccount', ns(), RUNNER_SERVICE_ACCOUNT),
      };
      expect(cached.secret).toMatchObject({ apiVersion: 'v1', kind: 'Secret' });
      // What the reconciler compares before it writes: nothing to write.
      expect(isSubset(secret, cached.secret)).toBe(true);
      expect(isSubset(account, cached.account)).toBe(true);
    } finally {
      await restarted.stop();
    }
  });
});
