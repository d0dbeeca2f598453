// What vmop 0.1 (and VM-Operator before 3.4) made for a running VM: a StatefulSet `<vm>` with one
// replica, `OnDelete` updates and claim templates for its runner data and disks (so pod `<vm>-0`
// and claims `runner-data-<vm>-0`, `<disk>-<vm>-0`), its pod template the runner pod of today
// (the runner never changed). An upgrade test starts from this.
import type { V1StatefulSet } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../src/api/virtual-machine.js';
import {
  APP_NAME,
  LABEL_INSTANCE,
  LABEL_NAME,
  ownerReference,
  vmLabels,
} from '../../src/reconcilers/virtual-machine/naming.js';
import { runnerClaims } from '../../src/reconcilers/virtual-machine/disks/claims.js';
import { desiredRunnerPod, type RunnerImage } from '../../src/reconcilers/virtual-machine/runner-pod/pod.js';

export function legacyStatefulSet(
  vm: VirtualMachine,
  options: { runnerImage: RunnerImage; hasImageRepository: boolean },
): V1StatefulSet {
  const name = vm.metadata.name;
  const claims = runnerClaims(vm, []);
  const pod = desiredRunnerPod(vm, {
    name,
    // The StatefulSet names claim volumes after their templates: pod volume `<volume>`, claim `<volume>-<vm>-0`.
    claims,
    defaultRunnerImage: options.runnerImage,
    hasImageRepository: options.hasImageRepository,
  });
  const claimVolumes = new Set(claims.map((claim) => claim.volume));
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: {
      name,
      namespace: vm.metadata.namespace,
      labels: vmLabels(name),
      ownerReferences: [ownerReference(vm)],
    },
    spec: {
      replicas: vm.spec.vm.state === 'Running' ? 1 : 0,
      serviceName: name,
      selector: { matchLabels: { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: name } },
      updateStrategy: { type: 'OnDelete' },
      persistentVolumeClaimRetentionPolicy: { whenDeleted: 'Retain', whenScaled: 'Retain' },
      template: {
        metadata: { labels: vmLabels(name), annotations: pod.metadata!.annotations },
        spec: {
          ...pod.spec!,
          volumes: pod.spec!.volumes!.filter((volume) => !claimVolumes.has(volume.name)),
        },
      },
      volumeClaimTemplates: claims.map((claim) => ({
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        metadata: { name: claim.volume, labels: vmLabels(name) },
        spec: claim.desired.spec,
      })),
    },
  };
}
