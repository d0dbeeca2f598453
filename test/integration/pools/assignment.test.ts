import { CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import type { AssignOutcome } from '../../../src/pools/assign.js';
import { eventually } from '../../support/eventually.js';
import { kubectl, sharedKubeConfig } from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';

const NAMESPACE = 'vmop-dev'; // the namespace of VM-Operator's pool examples
const POOL = 'test-vms';
const kubeConfig = sharedKubeConfig();
const core = kubeConfig.makeApiClient(CoreV1Api);
const custom = kubeConfig.makeApiClient(CustomObjectsApi);
const vmsRef = { group: 'vmoperator.jdrupes.org', version: 'v1', plural: 'vms', namespace: NAMESPACE };
const fixture = (file: string) => readFileSync(`test/fixtures/vm-operator/${file}`, 'utf8');

interface Vm {
  metadata: { name: string };
  spec: { pools?: string[]; vm: { state: string } };
  status?: { assignment?: { pool: string; user: string; lastUsed: string } };
}
const readVm = (name: string) => custom.getNamespacedCustomObject({ ...vmsRef, name }) as Promise<Vm>;
const poolVms = async () =>
  ((await custom.listNamespacedCustomObject(vmsRef)).items as Vm[]).filter((vm) =>
    vm.spec.pools?.includes(POOL),
  );

/** A Stopped VM of the pool (vmop's example, renamed); no node runs it here. */
function poolVm(name: string) {
  const vm = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));
  vm.metadata = { namespace: NAMESPACE, name };
  vm.spec.pools = [POOL];
  vm.spec.vm.state = 'Stopped';
  vm.spec.vm.disks = [];
  return stringify(vm);
}

const setRetention = (retention: string) =>
  kubectl([
    'patch',
    'vmpool',
    POOL,
    '-n',
    NAMESPACE,
    '--type',
    'merge',
    '-p',
    JSON.stringify({ spec: { retention } }),
  ]);

const execFileAsync = promisify(execFile);
/** Another process (as another manager replica) asks for a VM for each user, all at once. */
async function assignInProcess(redisUrl: string, users: string[]): Promise<Array<[string, AssignOutcome]>> {
  const args = ['tsx', 'test/support/pool-assigner.ts', inject('kubeconfigPath'), redisUrl, NAMESPACE, POOL];
  const { stdout } = await execFileAsync('npx', [...args, ...users]);
  return JSON.parse(stdout.trim().split('\n').at(-1)!);
}

const assignOne = async (redisUrl: string, user: string) => (await assignInProcess(redisUrl, [user]))[0]![1];

/** The messages of the VM's Events of `reason`. */
async function eventsOf(vm: string, reason: string) {
  const list = await core.listNamespacedEvent({
    namespace: NAMESPACE,
    fieldSelector: `involvedObject.name=${vm}`,
  });
  return list.items.filter((e) => e.reason === reason).map((e) => e.message);
}
/** A step writes the status before it posts its Event: the Event may follow the status just seen. */
const expectEvents = (vm: string, reason: string, check: (messages: Array<string | undefined>) => void) =>
  eventually(async () => check(await eventsOf(vm, reason)), 10_000);

describe("VM pools (VM-Operator's VmPool), real apiserver, Redis and manager", () => {
  let redis: RedisServer;
  let manager: ManagerProcess;

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

  it("accepts VM-Operator's VmPool examples and its pool VM unchanged", async () => {
    // kubectl apply validates strictly: an unknown field would be refused, not dropped.
    await kubectl(['apply', '-f', '-'], fixture('pools-md-vmpool.yaml'));
    expect(JSON.parse(await kubectl(['get', 'vmpool', POOL, '-n', NAMESPACE, '-o', 'json'])).spec).toEqual(
      parse(fixture('pools-md-vmpool.yaml')).spec,
    );
    await kubectl(['apply', '-f', '-'], fixture('dev-example-test-pool.yaml'));
    const pool = JSON.parse(await kubectl(['get', 'vmpool', POOL, '-n', NAMESPACE, '-o', 'json']));
    expect(pool.spec).toMatchObject({ retention: 'PT1m', loginOnAssignment: true });
    await kubectl(['apply', '-f', '-'], fixture('dev-example-test-vm01.yaml'));
    const vm = await readVm('test-vm01');
    expect(vm.spec.pools).toEqual([POOL]);
    expect(vm.spec).toMatchObject({ permissions: [{ role: 'admin', may: ['*'] }] });
    await kubectl(['delete', 'vm', 'test-vm01', '-n', NAMESPACE, '--wait=true']);
    expect(await kubectl(['get', 'vmpools', '-n', NAMESPACE])).toMatch(/test-vms\s+PT1m\s+true/);
  });

  it('refuses a pool whose retention is not ISO 8601, and a permission with both user and role', async () => {
    const bad = parse(fixture('dev-example-test-pool.yaml'));
    bad.metadata.name = 'bad';
    bad.spec.retention = '4 hours';
    await expect(kubectl(['apply', '-f', '-'], stringify(bad))).rejects.toThrow(/spec.retention/);
    bad.spec.retention = 'PT4H';
    bad.spec.permissions = [{ user: 'admin', role: 'user', may: ['start'] }];
    await expect(kubectl(['apply', '-f', '-'], stringify(bad))).rejects.toThrow(/either a user or a role/);
  });

  it('gives each user a VM of their own, also to requests at once from two replicas, and starts it', async () => {
    // The example pool's retention (PT1m) is shorter than this test takes on a loaded machine: the
    // first assignments would be released before they are looked at.
    await setRetention('PT1h');
    for (const name of ['pool-a', 'pool-b', 'pool-c', 'pool-d', 'pool-e', 'pool-f'])
      await kubectl(['apply', '-f', '-'], poolVm(name));
    const [first, second] = await Promise.all([
      assignInProcess(redis.url, ['u1', 'u2', 'u3', 'u1', 'u4']),
      assignInProcess(redis.url, ['u5', 'u1', 'u2', 'u3', 'u4']),
    ]);
    const vmOf = new Map<string, Set<string | undefined>>();
    for (const [user, outcome] of [...first, ...second])
      vmOf.set(user, new Set([...(vmOf.get(user) ?? []), outcome.vm]));
    // each user got one VM, however often they asked, and no two users the same one
    for (const vms of vmOf.values()) expect(vms.size).toBe(1);
    const given = [...vmOf.values()].map((vms) => [...vms][0]);
    expect(new Set(given).size).toBe(5);
    const vms = await poolVms();
    const assignedVms = vms.filter((vm) => vm.status?.assignment);
    expect(assignedVms.map((vm) => [vm.metadata.name, vm.status!.assignment!.user]).sort()).toEqual(
      [...vmOf].map(([user, vmNames]) => [[...vmNames][0], user]).sort(),
    );
    for (const vm of assignedVms) {
      expect(vm.spec.vm.state).toBe('Running');
      await expectEvents(vm.metadata.name, 'Assigned', (messages) =>
        expect(messages).toEqual([`assigned to ${vm.status!.assignment!.user} from pool ${POOL}`]),
      );
    }
    // the sixth VM is the last free one; then there is none
    const sixth = await assignOne(redis.url, 'u6');
    expect(sixth).toMatchObject({ assignedNow: true, started: true });
    const none = await assignOne(redis.url, 'u7');
    expect(none).toEqual({
      reason: 'NoFreeVm',
      message: `every VM of pool ${POOL} is in use; try again later`,
    });
  });

  it("releases assignments once the pool's retention has passed since their last use", async () => {
    await setRetention('PT4S');
    const released = await eventually(async () => {
      const vms = await poolVms();
      expect(vms.filter((vm) => vm.status?.assignment)).toEqual([]);
      return vms;
    }, 20_000);
    for (const vm of released)
      await expectEvents(vm.metadata.name, 'AssignmentReleased', (messages) =>
        expect(messages).toEqual([
          expect.stringMatching(/^u\d did not use it for the retention of pool test-vms \(PT4S\)$/),
        ]),
      );
    // free again: a new user gets one, and keeps it within the retention
    const again = await assignOne(redis.url, 'u7');
    expect(again).toMatchObject({ assignedNow: true, started: false });
    expect((await readVm(again.vm!)).status?.assignment?.user).toBe('u7');
  });

  it('unassigns every VM of a pool that is deleted, and a VM that leaves its pool', async () => {
    await setRetention('PT1h');
    const outcomes = await assignInProcess(redis.url, ['v1', 'v2']);
    const [v1Vm, v2Vm] = outcomes.map(([, outcome]) => outcome.vm!);
    await kubectl(['patch', 'vm', v1Vm!, '-n', NAMESPACE, '--type', 'merge', '-p', '{"spec":{"pools":[]}}']);
    await eventually(async () => expect((await readVm(v1Vm!)).status?.assignment).toBeUndefined());
    await expectEvents(v1Vm!, 'AssignmentReleased', (messages) =>
      expect(messages).toContain(`the VM left pool ${POOL}`),
    );
    expect((await readVm(v2Vm!)).status?.assignment?.user).toBe('v2');
    await kubectl(['delete', 'vmpool', POOL, '-n', NAMESPACE]);
    await eventually(async () => expect((await poolVms()).filter((vm) => vm.status?.assignment)).toEqual([]));
    await expectEvents(v2Vm!, 'AssignmentReleased', (messages) =>
      expect(messages).toContain(`its pool ${POOL} is gone`),
    );
    const noPool = await assignOne(redis.url, 'v3');
    expect(noPool).toEqual({ reason: 'NoSuchPool', message: `there is no pool ${POOL} in ${NAMESPACE}` });
  });
});
