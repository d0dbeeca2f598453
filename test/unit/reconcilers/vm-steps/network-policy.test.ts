// The runner pods' NetworkPolicy: vmop's listeners for the VM's own pods and the named peers
// only, the guest's ports as open as a pod's (closed to all but what the namespace's own
// policies allow once one of them selects the pod).
import type { V1NetworkPolicy } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { matchesLabelSelector } from '../../../../src/kube/label-selector.js';
import {
  asClientModel,
  desiredRunnerNetworkPolicy,
  isolatesIngress,
  type RunnerNetworkPolicy,
} from '../../../../src/reconcilers/virtual-machine/network-policy/policy.js';
import { networkPolicyStep } from '../../../../src/reconcilers/virtual-machine/network-policy/step.js';
import { desiredAttachPod } from '../../../../src/reconcilers/virtual-machine/disks/attach-pod.js';
import { nbdExportPolicy } from '../../../../src/reconcilers/virtual-machine/disks/nbd-export-policy.js';
import { callNames, testRunnerPod, testVm, vmState } from './vm-state-fixture.js';

const managers = { ipBlock: { cidr: '10.250.1.1/32' } };
const prometheus = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } };
const settings = { enabled: true, ingressFrom: [managers], metricsFrom: [prometheus] };
const withPorts = testVm(
  { networks: [{ user: { ports: [{ port: 7 }, { port: 53, protocol: 'UDP' }] } }] },
  { metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid', labels: { tier: 'web' } } },
);
const open = { isolatedByNamespace: false, spiceForAll: false };
const policyOf = (facts = open, vm = withPorts) => desiredRunnerNetworkPolicy(vm, settings, facts)!;
const rules = (policy: RunnerNetworkPolicy) => policy.spec.ingress;
const ruleFor = (policy: RunnerNetworkPolicy, from: unknown) =>
  rules(policy).find((rule) => JSON.stringify(rule.from) === JSON.stringify(from));

describe("a VM's runner NetworkPolicy", () => {
  it('is made only where the manager is told to', () => {
    expect(desiredRunnerNetworkPolicy(withPorts, { ...settings, enabled: false }, open)).toBeUndefined();
    expect(policyOf().metadata).toMatchObject({ name: 'vmop-runner-vm', namespace: 'ns' });
  });

  it("selects the VM's runner pods (a migration's target too) and no other VM's", () => {
    const selector = policyOf().spec.podSelector;
    expect(matchesLabelSelector(selector, testRunnerPod(withPorts).metadata!.labels)).toBe(true);
    const other = testVm({}, { metadata: { name: 'other', namespace: 'ns', uid: 'other-uid' } });
    expect(matchesLabelSelector(selector, testRunnerPod(other).metadata!.labels)).toBe(false);
  });

  it("lets the VM's own pods and the managers reach every port, Prometheus the metrics port only", () => {
    const policy = policyOf();
    expect(policy.spec.policyTypes).toEqual(['Ingress']);
    const peers = rules(policy)[0]!.from![0]!.podSelector!.matchLabels;
    expect(peers).toEqual({ 'app.kubernetes.io/name': 'vm-runner', 'app.kubernetes.io/instance': 'vm' });
    expect(rules(policy)[0]!.ports).toBeUndefined();
    expect(ruleFor(policy, [managers])!.ports).toBeUndefined();
    expect(ruleFor(policy, [prometheus])!.ports).toEqual([{ port: 9110, protocol: 'TCP' }]);
  });

  it("opens the guest's ports to everyone while no policy of the namespace selects the pods, then leaves them to those", () => {
    const openRule = (policy: RunnerNetworkPolicy) => rules(policy).find((rule) => rule.from === undefined);
    expect(openRule(policyOf())!.ports).toEqual([
      { port: 7, protocol: 'TCP' },
      { port: 53, protocol: 'UDP' },
    ]);
    expect(openRule(policyOf({ isolatedByNamespace: true, spiceForAll: false }))).toBeUndefined();
    // Nothing else is open to everyone: metrics, SPICE, the migration's ports.
    expect(openRule(policyOf(open, testVm({ display: { spice: { port: 5910 } } })))).toBeUndefined();
  });

  it('opens SPICE to everyone where a LoadBalancer Service publishes it, isolated or not', () => {
    const vm = testVm({ display: { spice: { port: 5910 } } });
    const policy = policyOf({ isolatedByNamespace: true, spiceForAll: true }, vm);
    expect(rules(policy).find((rule) => rule.from === undefined)!.ports).toEqual([
      { port: 5910, protocol: 'TCP' },
    ]);
  });
});

describe('a policy of the namespace isolates the runner pods', () => {
  const labels = testRunnerPod(withPorts).metadata!.labels!;
  const policy = (spec: V1NetworkPolicy['spec']): V1NetworkPolicy => ({ metadata: { name: 'p' }, spec });
  it('when it selects them for ingress: all pods, or by the labels the VM gives its pods', () => {
    expect(isolatesIngress(policy({ podSelector: {} }), labels)).toBe(true);
    expect(isolatesIngress(policy({ podSelector: { matchLabels: { tier: 'web' } } }), labels)).toBe(true);
    expect(isolatesIngress(policy({ podSelector: {}, policyTypes: ['Ingress', 'Egress'] }), labels)).toBe(
      true,
    );
  });
  it('not when it selects other pods or only their egress', () => {
    expect(isolatesIngress(policy({ podSelector: { matchLabels: { tier: 'db' } } }), labels)).toBe(false);
    expect(isolatesIngress(policy({ podSelector: {}, policyTypes: ['Egress'] }), labels)).toBe(false);
  });
});

describe('step: network policy', () => {
  const options = { runnerNetworkPolicy: settings };
  const denyAll = { metadata: { name: 'deny', namespace: 'ns' }, spec: { podSelector: {} } };

  /** A written rule's peers: client-node's model calls them `_from` (a plain `from` it drops). */
  type Written = { spec: { ingress: Array<{ _from?: unknown[]; from?: unknown }> } };
  const openRules = (written: Written) => written.spec.ingress.filter((rule) => rule._from === undefined);

  it('applies the policy as client-node writes it, without the open rule once a policy of the namespace selects the pods', async () => {
    const { state, calls } = vmState({ vm: withPorts, options });
    expect(await networkPolicyStep.run(state)).toEqual({ writes: ['NetworkPolicy'] });
    expect(callNames(calls)).toEqual(['apply']);
    const applied = calls[0]!.args as Written;
    expect(applied.spec.ingress.every((rule) => rule.from === undefined)).toBe(true);
    expect(openRules(applied)).toHaveLength(1);

    const isolated = vmState({ vm: withPorts, options, seen: { networkPolicies: [denyAll] } });
    await networkPolicyStep.run(isolated.state);
    expect(openRules(isolated.calls[0]!.args as Written)).toEqual([]);
  });

  it('writes nothing when its policy is as wanted; never takes over a foreign one of its name', async () => {
    const current = {
      ...policyOf(),
      metadata: { ...policyOf().metadata, ownerReferences: [{ uid: 'vm-uid' }] },
    };
    const same = vmState({ vm: withPorts, options, seen: { networkPolicies: [current as V1NetworkPolicy] } });
    expect(await networkPolicyStep.run(same.state)).toBeUndefined();
    expect(same.calls).toEqual([]);
    // As the watch's first list has it: through client-node's model (`_from`).
    const model = asClientModel(policyOf()) as unknown as { spec: unknown };
    const listed = { ...current, spec: model.spec } as unknown as V1NetworkPolicy;
    const sameListed = vmState({ vm: withPorts, options, seen: { networkPolicies: [listed] } });
    expect(await networkPolicyStep.run(sameListed.state)).toBeUndefined();

    const foreign = { metadata: { name: 'vmop-runner-vm', namespace: 'ns' }, spec: { podSelector: {} } };
    const taken = vmState({ vm: withPorts, options, seen: { networkPolicies: [foreign] } });
    expect(await networkPolicyStep.run(taken.state)).toMatchObject({
      events: [{ type: 'Warning', reason: 'NetworkPolicyNameTaken' }],
    });
    expect(taken.calls).toEqual([]);
  });

  it('deletes its own policy when the manager makes none', async () => {
    const current = {
      ...policyOf(),
      metadata: { ...policyOf().metadata, ownerReferences: [{ uid: 'vm-uid' }] },
    };
    const { state, calls } = vmState({
      vm: withPorts,
      options: { runnerNetworkPolicy: { ...settings, enabled: false } },
      seen: { networkPolicies: [current as V1NetworkPolicy] },
    });
    expect(await networkPolicyStep.run(state)).toEqual({ writes: ['NetworkPolicy (deleted)'] });
    expect(callNames(calls)).toEqual(['objects.delete']);
  });
});

describe("a disk export pod's NetworkPolicy", () => {
  const image = { image: 'runner:1', pullPolicy: 'IfNotPresent' as const };
  const attachPod = desiredAttachPod(withPorts, { volume: 'extra', claimName: 'vm-extra' }, 'node-1', image);
  const policy = nbdExportPolicy(attachPod, 'vm');

  it('is named as its pod, goes with what owns the pod, and selects that pod alone', () => {
    expect(policy.metadata).toMatchObject({ name: 'vm-attach-extra', namespace: 'ns' });
    expect(policy.metadata!.ownerReferences).toEqual(attachPod.metadata!.ownerReferences);
    const selector = policy.spec.podSelector;
    expect(matchesLabelSelector(selector, attachPod.metadata!.labels)).toBe(true);
    const otherVolume = desiredAttachPod(
      withPorts,
      { volume: 'other', claimName: 'vm-other' },
      'node-1',
      image,
    );
    expect(matchesLabelSelector(selector, otherVolume.metadata!.labels)).toBe(false);
    expect(matchesLabelSelector(selector, testRunnerPod(withPorts).metadata!.labels)).toBe(false);
  });

  it("lets only the VM's runner pods reach the NBD port", () => {
    expect(policy.spec.policyTypes).toEqual(['Ingress']);
    expect(policy.spec.ingress).toHaveLength(1);
    const [rule] = policy.spec.ingress;
    expect(rule!.ports).toEqual([{ port: 10809, protocol: 'TCP' }]);
    const [peer] = rule!.from!;
    expect(rule!.from).toHaveLength(1);
    expect(matchesLabelSelector(peer!.podSelector!, testRunnerPod(withPorts).metadata!.labels)).toBe(true);
    const other = testVm({}, { metadata: { name: 'other', namespace: 'ns', uid: 'other-uid' } });
    expect(matchesLabelSelector(peer!.podSelector!, testRunnerPod(other).metadata!.labels)).toBe(false);
    // Another export pod of the same VM is no client.
    expect(matchesLabelSelector(peer!.podSelector!, attachPod.metadata!.labels)).toBe(false);
  });
});
