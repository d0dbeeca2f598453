import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { desiredAttachPod } from '../../../src/reconcilers/virtual-machine/disks/attach-pod.js';
import {
  attachmentEvents,
  planDiskAttachments,
  withAttachments,
} from '../../../src/reconcilers/virtual-machine/disks/attachments.js';
import { desiredRunnerConfig } from '../../../src/reconcilers/virtual-machine/runner-config/config.js';
import { runnerClaims } from '../../../src/reconcilers/virtual-machine/disks/claims.js';
import { desiredRunnerPod } from '../../../src/reconcilers/virtual-machine/runner-pod/pod.js';
import { LABEL_VOLUME } from '../../../src/reconcilers/virtual-machine/naming.js';

const disk = (name: string) => ({
  volumeClaimTemplate: { metadata: { name }, spec: { resources: { requests: { storage: '1Gi' } } } },
});

function vmWith(...names: string[]) {
  return VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
    spec: { vm: { state: 'Running', disks: names.map(disk) } },
  });
}

const claimOf = (volume: string, annotations?: Record<string, string>) =>
  ({
    metadata: { name: `vm-${volume}`, namespace: 'ns', labels: { [LABEL_VOLUME]: volume }, annotations },
  }) as V1PersistentVolumeClaim;

/** The runner pod as vmop made it for a VM with `names` disks, running on node-a. */
function runnerPodWith(...names: string[]): V1Pod {
  const vm = vmWith(...names);
  const pod = desiredRunnerPod(vm, {
    name: 'vm',
    claims: runnerClaims(vm, []),
    defaultRunnerImage: { image: 'runner:1' },
    hasImageRepository: false,
  });
  pod.spec!.nodeName = 'node-a';
  pod.status = { phase: 'Running' };
  return pod;
}

function helper(volume: string, status: V1Pod['status']): V1Pod {
  const pod = desiredAttachPod(
    vmWith(volume),
    { volume: `${volume}-disk`, claimName: `vm-${volume}-disk` },
    'node-a',
    {
      image: 'runner:1',
    },
  );
  pod.metadata!.uid = `${volume}-uid`;
  pod.spec!.nodeName = 'node-a';
  pod.status = status;
  return pod;
}
const ready = (ip = '10.0.0.7'): V1Pod['status'] => ({
  phase: 'Running',
  podIP: ip,
  conditions: [{ type: 'Ready', status: 'True' }],
});

function plan(input: {
  spec: string[];
  pod?: V1Pod;
  claims?: V1PersistentVolumeClaim[];
  helpers?: V1Pod[];
  held?: RunnerSnapshot['hotplugDisks'];
  hasKeySecret?: boolean;
}) {
  const vm = vmWith(...input.spec);
  const existing = input.claims ?? input.spec.map((name) => claimOf(`${name}-disk`));
  return planDiskAttachments({
    claims: runnerClaims(vm, existing),
    existing,
    pod: input.pod,
    attachPods: input.helpers ?? [],
    snapshot: input.held ? ({ hotplugDisks: input.held } as RunnerSnapshot) : undefined,
    hasKeySecret: input.hasKeySecret ?? true,
  });
}

describe('disks attached at runtime', () => {
  it('a disk the spec gains while the VM runs gets a claim, the key Secret and an export on the runner node', () => {
    const gained = plan({
      spec: ['system', 'extra'],
      pod: runnerPodWith('system'),
      claims: [claimOf('system-disk')],
      hasKeySecret: false,
    });
    expect(gained.createClaims.map((claim) => claim.claimName)).toEqual(['vm-extra-disk']);
    expect(gained.statuses.get('extra-disk')).toMatchObject({ phase: 'Pending', reason: 'ClaimPending' });
    expect(gained.podVolumes).toEqual(new Set(['system-disk']));
    expect(gained.config).toEqual([]);

    const claimed = plan({ spec: ['system', 'extra'], pod: runnerPodWith('system'), hasKeySecret: false });
    expect(claimed.ensureSecret).toBe(true);
    expect(claimed.createPods).toEqual([
      { volume: 'extra-disk', claimName: 'vm-extra-disk', nodeName: 'node-a' },
    ]);
    expect(claimed.statuses.get('extra-disk')).toEqual({
      phase: 'Pending',
      reason: 'ExportStarting',
      message: 'exporting claim vm-extra-disk on node node-a',
    });
  });

  it('its export ready: the runner gets it; InProgress until the runner says attached', () => {
    const input = {
      spec: ['system', 'extra'],
      pod: runnerPodWith('system'),
      helpers: [helper('extra', ready())],
    };
    const attaching = plan(input);
    expect(attaching.config).toEqual([
      { volume: 'extra-disk', host: '10.0.0.7', port: 10809, export: 'disk' },
    ]);
    expect(attaching.statuses.get('extra-disk')).toMatchObject({ phase: 'InProgress' });
    expect(attaching.createPods).toEqual([]);
    expect(attaching.deletePods).toEqual([]);

    const attached = plan({ ...input, held: { 'extra-disk': { state: 'attached' } } });
    expect(attached.statuses.get('extra-disk')).toMatchObject({ phase: 'Attached', reason: 'Attached' });
    const failed = plan({
      ...input,
      held: { 'extra-disk': { state: 'failed', message: 'attaching failed: no' } },
    });
    expect(failed.statuses.get('extra-disk')).toEqual({
      phase: 'Failed',
      reason: 'AttachFailed',
      message: 'attaching failed: no',
    });
  });

  it("the runner config keeps the pod's drives as they were and lists the attached disk apart", () => {
    const vm = vmWith('system', 'extra');
    const attached = plan({
      spec: ['system', 'extra'],
      pod: runnerPodWith('system'),
      helpers: [helper('extra', ready())],
    });
    const config = desiredRunnerConfig(vm, {
      hasDisplaySecret: false,
      podDisks: attached.podVolumes,
      hotplugDisks: attached.config,
    })['/Runner'].vm;
    expect(config.drives).toEqual([{ type: 'raw', resource: '/dev/system-disk' }]);
    expect(config.hotplugDisks).toEqual(attached.config);
    // No pod (the next start): every disk is the pod's own.
    const next = desiredRunnerConfig(vm, { hasDisplaySecret: false })['/Runner'].vm;
    expect(next.drives?.map((drive) => drive.resource)).toEqual(['/dev/system-disk', '/dev/extra-disk']);
    expect(next.hotplugDisks).toBeUndefined();
  });

  it("a claim on another node: Failed with the scheduler's words; an import not done yet: Pending", () => {
    const stuck = helper('extra', {
      phase: 'Pending',
      conditions: [
        {
          type: 'PodScheduled',
          status: 'False',
          message: '0/2 nodes are available: 1 node(s) had volume node affinity conflict.',
        },
      ],
    });
    const conflict = plan({ spec: ['system', 'extra'], pod: runnerPodWith('system'), helpers: [stuck] });
    expect(conflict.statuses.get('extra-disk')).toEqual({
      phase: 'Failed',
      reason: 'ClaimOnAnotherNode',
      message:
        'claim vm-extra-disk cannot be used on node node-a; its pod cannot be scheduled: 0/2 nodes are available: 1 node(s) had volume node affinity conflict.',
    });
    expect(conflict.config).toEqual([]);

    const importing = plan({
      spec: ['system', 'extra'],
      pod: runnerPodWith('system'),
      claims: [
        claimOf('system-disk'),
        claimOf('extra-disk', { 'vmoperator.jdrupes.org/import-source': 'abc' }),
      ],
    });
    expect(importing.statuses.get('extra-disk')).toMatchObject({ phase: 'Pending', reason: 'Importing' });
    expect(importing.createPods).toEqual([]);
  });

  it('a disk the spec loses: detached by the runner first, its export goes after', () => {
    const input = { spec: ['system'], pod: runnerPodWith('system'), helpers: [helper('extra', ready())] };
    const detaching = plan({ ...input, held: { 'extra-disk': { state: 'attached' } } });
    expect(detaching.config).toEqual([]);
    expect(detaching.deletePods).toEqual([]);
    expect(detaching.statuses.get('extra-disk')).toMatchObject({ phase: 'Detaching' });
    const statuses = withAttachments([], detaching, [claimOf('extra-disk')]);
    expect(statuses).toEqual([
      {
        name: 'extra-disk',
        claim: 'vm-extra-disk',
        phase: 'Ready',
        attachment: detaching.statuses.get('extra-disk'),
      },
    ]);

    const detached = plan(input);
    expect(detached.deletePods.map((pod) => pod.metadata?.name)).toEqual(['vm-attach-extra-disk']);
    expect(attachmentEvents(statuses, [])).toEqual([
      { type: 'Normal', reason: 'DiskDetached', message: 'disk extra-disk: detached from the running VM' },
    ]);
  });

  it('a disk the VM started with is not detached while it runs: it goes at the next restart', () => {
    const kept = plan({ spec: ['extra'], pod: runnerPodWith('system', 'extra') });
    expect(kept.keptUntilRestart).toEqual([{ volume: 'system-disk', claim: 'vm-system-disk' }]);
    expect(kept.podVolumes).toEqual(new Set(['system-disk', 'extra-disk']));
    const [, gone] = withAttachments(
      [{ name: 'extra-disk', claim: 'vm-extra-disk', phase: 'Ready' }],
      kept,
      [],
    );
    expect(gone).toMatchObject({
      name: 'system-disk',
      attachment: { phase: 'Attached', reason: 'DetachAtRestart' },
    });
  });

  it('no runner pod (stopped, restarting): exports go, and the next pod has every disk of the spec', () => {
    const stopped = plan({ spec: ['system', 'extra'], helpers: [helper('extra', ready())] });
    expect(stopped.deletePods).toHaveLength(1);
    expect(stopped.podVolumes).toBeUndefined();
    expect(stopped.statuses.size).toBe(0);
    // Its guest still shutting down: the exports stay to the end.
    const stopping = runnerPodWith('system');
    stopping.metadata!.deletionTimestamp = new Date();
    const shuttingDown = plan({
      spec: ['system', 'extra'],
      pod: stopping,
      helpers: [helper('extra', ready())],
    });
    expect(shuttingDown.deletePods).toEqual([]);
    expect(shuttingDown.podVolumes).toBeUndefined();
    // Still starting: the disk waits for the pod to run (it is not in the pod's config either).
    const starting = runnerPodWith('system');
    starting.status = { phase: 'Pending' };
    const waits = plan({ spec: ['system', 'extra'], pod: starting, helpers: [helper('extra', ready())] });
    expect(waits.createPods).toEqual([]);
    expect(waits.deletePods).toEqual([]);
    expect(waits.podVolumes).toEqual(new Set(['system-disk']));
  });

  it('an export that ended is made anew', () => {
    const ended = plan({
      spec: ['system', 'extra'],
      pod: runnerPodWith('system'),
      helpers: [helper('extra', { phase: 'Failed' })],
    });
    expect(ended.deletePods.map((pod) => pod.metadata?.uid)).toEqual(['extra-uid']);
    expect(ended.statuses.get('extra-disk')).toMatchObject({ phase: 'Pending', reason: 'ExportRestarting' });
  });

  it('the export pod: qemu-nbd with TLS-PSK from the VM key, no privileges, on the runner node', () => {
    const pod = helper('extra', undefined);
    const container = pod.spec!.containers[0]!;
    expect(container.command).toEqual(['qemu-nbd']);
    expect(container.args).toContain('--tls-creds');
    expect(container.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(pod.spec!.volumes).toContainEqual({ name: 'keys', secret: { secretName: 'vm-migration' } });
    expect(pod.spec!.automountServiceAccountToken).toBe(false);
    expect(pod.spec!.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(
      pod.spec!.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms,
    ).toEqual([{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-a'] }] }]);
  });
});
