// Each VM's runner NetworkPolicy against a real apiserver, with a manager process told to make
// them: the rules the apiserver keeps (peers included), the guest's ports open to everyone until a
// policy of the namespace selects the runner pods, and back when it goes. (Whether an enforcer
// holds traffic to them: the dev bed's guest-ports and tenancy suites.)
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { eventually } from '../../support/eventually.js';
import { createTestNamespace, kubectl, sharedKubeConfig, type TestNamespace } from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';

const kubeConfig = sharedKubeConfig();
const MANAGERS = { ipBlock: { cidr: '10.250.9.1/32' } };
const PROMETHEUS = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } };

interface Rule {
  from?: unknown[];
  ports?: Array<{ port: number; protocol: string }>;
}

describe("VMs' runner NetworkPolicies (real apiserver, one manager, no node)", () => {
  let namespace: TestNamespace;
  let redis: RedisServer;
  let manager: ManagerProcess;
  const ns = () => namespace.name;
  const rulesOf = async (vm: string): Promise<Rule[]> =>
    JSON.parse(await kubectl(['get', 'networkpolicy', `vmop-runner-${vm}`, '-n', ns(), '-o', 'json'])).spec
      .ingress;
  const openRule = (rules: Rule[]) => rules.find((rule) => rule.from === undefined);

  beforeAll(async () => {
    await installCrds(kubeConfig);
    namespace = await createTestNamespace(kubeConfig, 'vmop-netpol');
    redis = await startRedis();
    manager = startManagerProcess([
      ...['--kubeconfig', inject('kubeconfigPath'), '--redis', redis.url, '-n', ns()],
      '--runner-network-policy',
      ...['--runner-ingress-from', JSON.stringify(MANAGERS)],
      ...['--runner-metrics-from', JSON.stringify(PROMETHEUS)],
    ]);
    await manager.waitForLog((l) => l.msg === 'manager started');
  });

  afterAll(async () => {
    await manager?.stop();
    await redis?.stop();
    await namespace?.cleanup();
    expect(manager.logs.filter((l) => l.level >= 50)).toEqual([]);
  });

  it("keeps the peers it was given; opens the guest's ports until a policy of the namespace selects the pods, and again once it goes", async () => {
    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: web, namespace: ${ns()}, labels: {tier: web}}
spec:
  vm: {state: Stopped, maximumRam: 256Mi, networks: [{user: {ports: [{port: 80}]}}]}
`,
    );
    const rules = await eventually(() => rulesOf('web'), 30_000);
    // Every rule but the guest's names its peers: a rule without any would let every pod in.
    expect(rules.map((rule) => rule.from)).toEqual([
      [
        {
          podSelector: {
            matchLabels: { 'app.kubernetes.io/name': 'vm-runner', 'app.kubernetes.io/instance': 'web' },
          },
        },
      ],
      [MANAGERS],
      [PROMETHEUS],
      undefined,
    ]);
    expect(rules[2]!.ports).toEqual([{ port: 9110, protocol: 'TCP' }]);
    expect(openRule(rules)!.ports).toEqual([{ port: 80, protocol: 'TCP' }]);

    // A policy of the namespace that selects the VM's pods by its labels: vmop's opens nothing more.
    await kubectl(
      ['apply', '-n', ns(), '-f', '-'],
      `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-namespace}
spec:
  podSelector: {matchLabels: {tier: web}}
  ingress: [{from: [{podSelector: {}}]}]
`,
    );
    await eventually(async () => expect(openRule(await rulesOf('web'))).toBeUndefined(), 30_000);
    // One that selects other pods changes nothing; the first one gone, the guest's ports are open again.
    await kubectl(
      ['apply', '-n', ns(), '-f', '-'],
      `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-only}
spec: {podSelector: {matchLabels: {tier: db}}}
`,
    );
    await kubectl(['delete', 'networkpolicy', 'web-from-namespace', '-n', ns()]);
    await eventually(
      async () => expect(openRule(await rulesOf('web'))?.ports).toEqual([{ port: 80, protocol: 'TCP' }]),
      30_000,
    );
  });

  it('puts back a rule someone took out of it', async () => {
    await eventually(() => rulesOf('web'), 30_000);
    await kubectl([
      ...['patch', 'networkpolicy', 'vmop-runner-web', '-n', ns(), '--type=json'],
      '-p',
      '[{"op": "remove", "path": "/spec/ingress/3"}]',
    ]);
    await eventually(async () => expect(openRule(await rulesOf('web'))).toBeDefined(), 30_000);
  });
});
