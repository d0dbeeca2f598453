import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import { VirtualMachine, type MigrationState } from '../../../src/api/virtual-machine.js';
import { migratability } from '../../../src/reconcilers/virtual-machine/migration/migratable.js';
import {
  planMigration,
  type MigrationFacts,
} from '../../../src/reconcilers/virtual-machine/migration/plan.js';
import { MIGRATE_ANNOTATION } from '../../../src/reconcilers/virtual-machine/migration/request.js';
import { isMigrationTarget } from '../../../src/reconcilers/virtual-machine/migration/target.js';
import { nodeFacts } from '../../../src/reconcilers/virtual-machine/node-facts.js';
import { desiredRunnerPod } from '../../../src/reconcilers/virtual-machine/runner-pod/pod.js';
import { runnerClaims } from '../../../src/reconcilers/virtual-machine/disks/claims.js';
import { MIGRATION_ANNOTATION } from '../../../src/runner/migration/request.js';
import { statusPatch } from '../../../src/kube/merge-patch.js';

const NOW = new Date('2026-11-25T10:00:00Z');
const ready = { status: { conditions: [{ type: 'Ready', status: 'True' }] } };

function vmWith(options: { request?: boolean; state?: MigrationState; disk?: 'shared' | 'local' } = {}) {
  return VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: {
      name: 'vm',
      namespace: 'ns',
      uid: 'vm-uid',
      ...(options.request && {
        annotations: { [MIGRATE_ANNOTATION]: JSON.stringify({ id: 'm1', operation: 'op' }) },
      }),
    },
    spec: {
      vm: {
        state: 'Running',
        maximumRam: '256Mi',
        disks: [
          {
            volumeClaimTemplate: {
              metadata: { name: 'data' },
              spec: { accessModes: [options.disk === 'shared' ? 'ReadWriteMany' : 'ReadWriteOnce'] },
            },
          },
        ],
      },
    },
    status: {
      runnerPod: { name: 'vm', uid: 'vm-pod' },
      ...(options.state && { migrationState: options.state }),
    },
  });
}

/** The VM's claims as vmop makes them (runner data shared), bound. */
const claimsOf = (vm: VirtualMachine): V1PersistentVolumeClaim[] =>
  runnerClaims(vm, [], { runnerDataAccessMode: 'ReadWriteMany' }).map((claim) => ({
    ...claim.desired,
    metadata: { ...claim.desired.metadata, uid: `${claim.claimName}-uid` },
  }));

function sourcePod(vm: VirtualMachine, request?: object): V1Pod {
  const pod = desiredRunnerPod(vm, {
    name: 'vm',
    claims: runnerClaims(vm, []),
    defaultRunnerImage: { image: 'runner' },
  });
  pod.metadata!.uid = 'vm-pod';
  if (request) pod.metadata!.annotations![MIGRATION_ANNOTATION] = JSON.stringify(request);
  pod.spec!.nodeName = 'node-1';
  pod.status = { phase: 'Running', podIP: '10.0.0.1' };
  return pod;
}

const snapshot = (migration?: RunnerSnapshot['migration'], phase: RunnerSnapshot['phase'] = 'running') =>
  ({ phase, migration }) as RunnerSnapshot;

function facts(vm: VirtualMachine, more: Partial<MigrationFacts> = {}): MigrationFacts {
  const claims = more.claims ?? claimsOf(vm);
  const current = more.current ?? sourcePod(vm);
  return {
    vm,
    request: vm.metadata.annotations?.[MIGRATE_ANNOTATION] ? { id: 'm1', operation: 'op' } : undefined,
    pods: [current],
    claims,
    current,
    sourceSnapshot: snapshot(),
    migratable: migratability(vm, current, claims),
    node: (name) => nodeFacts(name, ready),
    now: NOW,
    ...more,
  };
}

const started: MigrationState = {
  id: 'm1',
  operation: 'op',
  sourcePod: 'vm',
  sourceNode: 'node-1',
  startTimestamp: '2026-11-25T09:59:00Z',
};

describe('planMigration', () => {
  it('records a new request first (the status names the source before anything is made)', () => {
    const plan = planMigration(facts(vmWith({ request: true })));
    expect(plan.state).toMatchObject({ id: 'm1', sourcePod: 'vm', sourceNode: 'node-1' });
    expect(plan.state?.result).toBeUndefined();
    expect(plan).toMatchObject({ migrating: true, ensureSecret: true });
    expect(plan.createTarget).toBeUndefined();
  });

  it('waits, saying why, while the migration limits leave no slot; begins once one is free', () => {
    const waiting =
      'waiting for a free migration slot: 1 of 1 under way in the cluster, 0 of 2 from node-1; 0 asked before';
    const queued = planMigration(facts(vmWith({ request: true }), { slot: { granted: false, waiting } }));
    expect(queued.state).toMatchObject({ id: 'm1', sourcePod: 'vm', waiting });
    expect(queued).toMatchObject({ migrating: false, requeueAfterMs: 2_000 });
    expect(queued.ensureSecret).toBeUndefined();
    // Asked again with nothing changed: nothing to write.
    const vm = vmWith({ request: true, state: queued.state });
    expect(planMigration(facts(vm, { slot: { granted: false, waiting } })).state).toBeUndefined();
    const begun = planMigration(facts(vm, { slot: { granted: true } }));
    expect(begun).toMatchObject({ migrating: true, ensureSecret: true });
    expect(begun.state).toMatchObject({ id: 'm1' });
    expect(begun.state?.waiting).toBeUndefined();
  });

  it("waits while a snapshot copies the running VM's disks; begins once it is done", () => {
    const queued = planMigration(facts(vmWith({ request: true }), { copying: 'snapshot nightly' }));
    expect(queued.state).toMatchObject({
      id: 'm1',
      waiting: "snapshot nightly copies the VM's disks: the VM moves once it has copied them",
    });
    expect(queued).toMatchObject({ migrating: false, requeueAfterMs: 2_000 });
    const vm = vmWith({ request: true, state: queued.state });
    expect(planMigration(facts(vm, { copying: 'snapshot nightly' })).state).toBeUndefined();
    expect(planMigration(facts(vm))).toMatchObject({ migrating: true, state: { id: 'm1' } });
  });

  it('refuses a request for a VM that does not run, or cannot migrate, with the reason', () => {
    const vm = vmWith({ request: true });
    expect(planMigration(facts(vm, { sourceSnapshot: snapshot(undefined, 'stopped') })).state).toMatchObject({
      result: 'Failed',
      message: 'the VM does not run',
    });
    const old = sourcePod(vm);
    old.spec!.volumes = old.spec!.volumes!.filter((volume) => volume.name !== 'podinfo');
    const plan = planMigration(facts(vm, { current: old, pods: [old] }));
    expect(plan.state).toMatchObject({ result: 'Failed' });
    expect(plan.state?.message).toMatch(/made by a vmop that could not migrate/);
  });

  it('asks the source to listen, with the node-local disk to copy; a shared disk is not copied', () => {
    const local = planMigration(facts(vmWith({ request: true, state: started })));
    expect(local.annotate?.request).toEqual({ id: 'm1', role: 'source', mirror: ['/dev/data-disk'] });
    const shared = planMigration(facts(vmWith({ request: true, state: started, disk: 'shared' })));
    expect(shared.annotate?.request).toEqual({ id: 'm1', role: 'source', mirror: [] });
    // The annotation is the record; the runner is sent the request at once.
    expect(shared.send).toEqual(shared.annotate);
  });

  it('sends the source its request again until its runner acts on it, then no more', () => {
    const vm = vmWith({ request: true, state: started, disk: 'shared' });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: [] });
    const notYet = planMigration(facts(vm, { current: source, pods: [source] }));
    expect(notYet.annotate).toBeUndefined();
    expect(notYet.send).toEqual({ pod: source, request: { id: 'm1', role: 'source', mirror: [] } });
    // A previous migration's progress is no answer to this one.
    const previous = planMigration(
      facts(vm, {
        current: source,
        pods: [source],
        sourceSnapshot: snapshot({ id: 'm0', role: 'source', state: 'completed' }),
      }),
    );
    expect(previous.send?.request.id).toBe('m1');
    const acted = planMigration(
      facts(vm, {
        current: source,
        pods: [source],
        sourceSnapshot: snapshot({ id: 'm1', role: 'source', state: 'listening', port: 7000 }),
      }),
    );
    expect(acted.send).toBeUndefined();
  });

  it("makes the target with the runner image the VM takes now: after an upgrade, the new default's", () => {
    const vm = vmWith({ request: true, state: started, disk: 'shared' });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: [] });
    const listening = snapshot({ id: 'm1', role: 'source', state: 'listening', port: 4711 });
    const image = (plan: ReturnType<typeof planMigration>) =>
      plan.createTarget!.pod.spec!.containers[0]!.image;
    const upgraded = planMigration(
      facts(vm, { current: source, pods: [source], sourceSnapshot: listening, image: { image: 'runner:2' } }),
    );
    expect(source.spec!.containers[0]!.image).toBe('runner');
    expect(image(upgraded)).toBe('runner:2');
    expect(
      image(planMigration(facts(vm, { current: source, pods: [source], sourceSnapshot: listening }))),
    ).toBe('runner');
  });

  it('makes the target once the source listens: off the source node, its own claim for the copied disk', () => {
    const vm = vmWith({ request: true, state: started });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: ['/dev/data-disk'] });
    const plan = planMigration(
      facts(vm, {
        current: source,
        pods: [source],
        sourceSnapshot: snapshot({ id: 'm1', role: 'source', state: 'listening', port: 4711 }),
      }),
    );
    expect(plan.state).toMatchObject({ targetPod: 'vm-m1', copiedDisks: ['data-disk'] });
    const target = plan.createTarget!.pod;
    expect(isMigrationTarget(target)).toBe(true);
    expect(JSON.parse(target.metadata!.annotations![MIGRATION_ANNOTATION]!)).toMatchObject({
      id: 'm1',
      role: 'target',
      source: '10.0.0.1:4711',
    });
    // Prometheus finds the VM's metrics at the target as it did at the source.
    expect(target.metadata!.annotations).toMatchObject({
      'prometheus.io/scrape': 'true',
      'prometheus.io/port': '9110',
    });
    expect(target.spec!.containers[0]!.ports).toEqual([{ name: 'metrics', containerPort: 9110 }]);
    expect(target.spec!.nodeName).toBeUndefined();
    expect(
      target.spec!.affinity!.nodeAffinity!.requiredDuringSchedulingIgnoredDuringExecution!
        .nodeSelectorTerms[0]!.matchExpressions,
    ).toContainEqual({ key: 'kubernetes.io/hostname', operator: 'NotIn', values: ['node-1'] });
    const claimOf = (volume: string) =>
      target.spec!.volumes!.find((v) => v.name === volume)!.persistentVolumeClaim!.claimName;
    expect(claimOf('data-disk')).toBe('vm-data-disk-m1');
    expect(claimOf('runner-data')).toBe('vm-runner-data'); // shared: the same
    expect(plan.createTarget!.claims.map((claim) => claim.metadata!.name)).toEqual(['vm-data-disk-m1']);
    expect(target.spec!.containers[0]!.env).toContainEqual({ name: 'VMOP_SNAPSHOT_SUFFIX', value: '@vm-m1' });
  });

  it("names a copy after the volume, also when the disk is on an earlier migration's copy (names do not grow)", () => {
    const vm = vmWith({ request: true, state: started });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: ['/dev/data-disk'] });
    source.spec!.volumes = source.spec!.volumes!.map((v) =>
      v.name === 'data-disk' ? { ...v, persistentVolumeClaim: { claimName: 'vm-data-disk-m0' } } : v,
    );
    const claims = claimsOf(vm).map((claim) =>
      claim.metadata!.name === 'vm-data-disk'
        ? { ...claim, metadata: { ...claim.metadata, name: 'vm-data-disk-m0' } }
        : claim,
    );
    const plan = planMigration(
      facts(vm, {
        current: source,
        pods: [source],
        claims,
        sourceSnapshot: snapshot({ id: 'm1', role: 'source', state: 'listening', port: 4711 }),
      }),
    );
    expect(plan.createTarget!.claims.map((claim) => claim.metadata!.name)).toEqual(['vm-data-disk-m1']);
    const volume = plan.createTarget!.pod.spec!.volumes!.find((v) => v.name === 'data-disk');
    expect(volume?.persistentVolumeClaim?.claimName).toBe('vm-data-disk-m1');
  });

  it('switches to the target once the guest runs there, and tidies up: the source pod and the old local claim go', () => {
    const state = { ...started, targetPod: 'vm-m1', targetNode: 'node-2', copiedDisks: ['data-disk'] };
    const vm = vmWith({ request: true, state });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: ['/dev/data-disk'] });
    const target = { ...sourcePod(vm), metadata: { name: 'vm-m1', uid: 'target-uid' } } as V1Pod;
    target.spec = {
      ...target.spec!,
      nodeName: 'node-2',
      volumes: target.spec!.volumes!.map((v) =>
        v.name === 'data-disk' ? { ...v, persistentVolumeClaim: { claimName: 'vm-data-disk-m1' } } : v,
      ),
    };
    const copy = {
      metadata: {
        name: 'vm-data-disk-m1',
        uid: 'copy',
        labels: { 'vmoperator.jdrupes.org/volume': 'data-disk', 'vmoperator.jdrupes.org/migration': 'm1' },
      },
    };
    const plan = planMigration(
      facts(vm, {
        current: source,
        pods: [source, target],
        claims: [...claimsOf(vm), copy],
        sourceSnapshot: snapshot(
          { id: 'm1', role: 'source', state: 'completed', downtimeMs: 120, totalMs: 900, bytes: 9 },
          'stopped',
        ),
        targetSnapshot: snapshot({ id: 'm1', role: 'target', state: 'completed' }),
      }),
    );
    expect(plan.switchTo).toBe(target);
    expect(plan.state).toMatchObject({
      result: 'Succeeded',
      targetNode: 'node-2',
      downtimeMs: 120,
      transferMs: 900,
      bytesTransferred: 9,
    });
    expect(plan.deletePods).toEqual([source]);
    expect(plan.deleteClaims.map((claim) => claim.metadata!.name)).toEqual(['vm-data-disk']);
    expect(plan.keepClaims).toEqual([copy]);
  });

  it('fails when the target pod goes away: the source is told to give up, the copy claims go, the guest stays', () => {
    const state = { ...started, targetPod: 'vm-m1', targetNode: 'node-2', copiedDisks: ['data-disk'] };
    const vm = vmWith({ request: true, state });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: ['/dev/data-disk'] });
    const copy = {
      metadata: {
        name: 'vm-data-disk-m1',
        uid: 'copy',
        labels: { 'vmoperator.jdrupes.org/migration': 'm1' },
      },
    };
    const plan = planMigration(
      facts(vm, {
        current: source,
        pods: [source],
        claims: [...claimsOf(vm), copy],
        sourceSnapshot: snapshot({ id: 'm1', role: 'source', state: 'transferring' }),
      }),
    );
    expect(plan.state).toMatchObject({ result: 'Failed', message: 'the target pod vm-m1 went away' });
    expect(plan.switchTo).toBeUndefined();
    expect(plan.annotate?.request).toMatchObject({ id: 'm1', role: 'source', abort: true });
    expect(plan.send).toEqual(plan.annotate);
    // Recorded, it is sent again while the source's migration is under way; not once it gave up.
    const aborting = sourcePod(vm, { id: 'm1', role: 'source', mirror: [], abort: true });
    const failedState = plan.state!;
    const later = (state: 'transferring' | 'failed') =>
      planMigration(
        facts(vmWith({ request: true, state: failedState }), {
          current: aborting,
          pods: [aborting],
          sourceSnapshot: snapshot({ id: 'm1', role: 'source', state }),
        }),
      );
    expect(later('transferring').annotate).toBeUndefined();
    expect(later('transferring').send?.request).toMatchObject({ id: 'm1', abort: true });
    expect(later('failed').send).toBeUndefined();
    expect(plan.deleteClaims).toEqual([copy]);
    expect(plan.migrating).toBe(false);
  });

  it.each([
    [
      'its QEMU could not start',
      {
        snapshot: {
          phase: 'failed',
          message: 'qemu exited with code 1 during start: failed to initialize spice server',
        },
      },
      'the target cannot take the VM: qemu exited with code 1 during start: failed to initialize spice server',
    ],
    [
      'its runner image cannot be pulled',
      { waiting: { reason: 'ImagePullBackOff', message: 'Back-off pulling image "nope/runner:1"' } },
      'the target\'s runner cannot start: Back-off pulling image "nope/runner:1"',
    ],
    [
      'its runner was restarted',
      { restarted: { exitCode: 137, reason: 'Error' } },
      "the target's runner was restarted (Error)",
    ],
  ])('fails at once when the target cannot take the guest: %s, in its own words', (_what, how, message) => {
    const state = { ...started, targetPod: 'vm-m1', targetNode: 'node-2' };
    const vm = vmWith({ request: true, state });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: [] });
    const target = { ...sourcePod(vm), metadata: { name: 'vm-m1', uid: 'target-uid' } } as V1Pod;
    target.spec = { ...target.spec!, nodeName: 'node-2' };
    const container = { name: 'runner', image: 'runner', imageID: '', ready: false };
    if ('waiting' in how)
      target.status = {
        phase: 'Pending',
        containerStatuses: [{ ...container, restartCount: 0, state: { waiting: how.waiting } }],
      };
    if ('restarted' in how)
      target.status = {
        phase: 'Running',
        containerStatuses: [
          { ...container, restartCount: 1, lastState: { terminated: how.restarted }, state: { running: {} } },
        ],
      };
    const plan = planMigration(
      facts(vm, {
        current: source,
        pods: [source, target],
        sourceSnapshot: snapshot({ id: 'm1', role: 'source', state: 'transferring' }),
        ...('snapshot' in how && {
          targetSnapshot: { ...snapshot(undefined, 'failed'), message: how.snapshot.message },
        }),
      }),
    );
    expect(plan.state).toMatchObject({ result: 'Failed', message });
    expect(plan.deletePods).toEqual([target]);
    expect(plan.annotate?.request).toMatchObject({ abort: true });
  });

  it('a target still starting is waited for', () => {
    const state = { ...started, targetPod: 'vm-m1', targetNode: 'node-2' };
    const vm = vmWith({ request: true, state });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: [] });
    const target = { ...sourcePod(vm), metadata: { name: 'vm-m1', uid: 'target-uid' } } as V1Pod;
    target.spec = { ...target.spec!, nodeName: 'node-2' };
    const waiting = { reason: 'ContainerCreating' };
    target.status = {
      phase: 'Pending',
      containerStatuses: [
        { name: 'runner', image: 'runner', imageID: '', ready: false, restartCount: 0, state: { waiting } },
      ],
    };
    const plan = planMigration(
      facts(vm, {
        current: source,
        pods: [source, target],
        sourceSnapshot: snapshot({ id: 'm1', role: 'source', state: 'listening' }),
      }),
    );
    expect(plan.state?.result).toBeUndefined();
    expect(plan.migrating).toBe(true);
  });

  it('gives up after the deadline, and when its operation ended', () => {
    const old = { ...started, startTimestamp: '2026-11-25T09:40:00Z' };
    expect(planMigration(facts(vmWith({ request: true, state: old }))).state?.message).toMatch(
      /not done after 10 minutes/,
    );
    expect(planMigration(facts(vmWith({ state: started }))).state?.message).toMatch(/cancelled/);
  });

  it("keeps vmop's own placement of an earlier target out of the next one", () => {
    const vm = vmWith({ request: true, state: started, disk: 'shared' });
    const source = sourcePod(vm, { id: 'm1', role: 'source', mirror: [] });
    source.spec!.affinity = {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'NotIn', values: ['node-2'] }] },
          ],
        },
      },
    };
    const plan = planMigration(
      facts(vm, {
        current: source,
        pods: [source],
        sourceSnapshot: snapshot({ id: 'm1', role: 'source', state: 'listening', port: 1 }),
      }),
    );
    expect(
      plan.createTarget!.pod.spec!.affinity!.nodeAffinity!.requiredDuringSchedulingIgnoredDuringExecution!
        .nodeSelectorTerms,
    ).toEqual([
      { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'NotIn', values: ['node-1'] }] },
    ]);
  });
});

describe('statusPatch', () => {
  it("nulls what went away inside objects too, so a new migrationState does not inherit the last one's result", () => {
    const done = { ...started, result: 'Succeeded' as const, targetPod: 'vm-m1', downtimeMs: 72 };
    const next = { id: 'm2', sourcePod: 'vm-m1', startTimestamp: '2026-11-25T10:00:00Z' };
    expect(statusPatch({ migrationState: done, node: 'a' }, { migrationState: next })).toEqual({
      node: null,
      migrationState: {
        ...next,
        operation: null,
        sourceNode: null,
        result: null,
        targetPod: null,
        downtimeMs: null,
      },
    });
  });
});
