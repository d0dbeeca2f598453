import { beforeAll, describe, expect, it } from 'vitest';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { applyError, createTestNamespace, kubectl, sharedKubeConfig } from '../../support/kube.js';

function vmManifest(namespace: string, name: string, vmYaml: string): string {
  const indented = vmYaml
    .trim()
    .split('\n')
    .map((line) => `    ${line}`)
    .join('\n');
  return `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${namespace}}
spec:
  vm:
${indented}
`;
}

describe('VirtualMachine CRD on a real apiserver', () => {
  let namespace: string;

  beforeAll(async () => {
    const kubeConfig = sharedKubeConfig();
    await installCrds(kubeConfig);
    await installCrds(kubeConfig); // idempotent
    const ns = await createTestNamespace(kubeConfig, 'api');
    namespace = ns.name;
    return ns.cleanup;
  });

  it("accepts VM-Operator's local-path example unchanged (server-side dry run)", async () => {
    // The example names its namespace; other suites may use it too, so apply (not create) it.
    await kubectl(['apply', '-f', '-'], 'apiVersion: v1\nkind: Namespace\nmetadata: {name: vmop-demo}\n');
    const out = await kubectl([
      'apply',
      '--dry-run=server',
      '-o',
      'json',
      '-f',
      'examples/local-path-test-vm.yaml',
    ]);
    const stored = JSON.parse(out);
    expect(stored.spec.vm).toMatchObject({
      state: 'Running',
      maximumCpus: 4,
      firmware: 'uefi',
      powerdownTimeout: 900,
    });
  });

  it('applies the documented defaults and shows them in kubectl get', async () => {
    expect(await applyError(vmManifest(namespace, 'defaults', 'maximumCpus: 2'))).toBe('');
    const vm = JSON.parse(await kubectl(['get', 'vm', '-n', namespace, 'defaults', '-o', 'json']));
    expect(vm.spec.vm).toMatchObject({
      state: 'Stopped',
      maximumRam: '1G',
      disks: [],
      networks: [],
    });
    // No CPU model stored: the VM's class gives it when it runs, else QEMU's host.
    expect(vm.spec.vm.cpuModel).toBeUndefined();
    expect(vm.spec.guestShutdownStops).toBe(false);
    const table = await kubectl(['get', 'vm', '-n', namespace, 'defaults']);
    expect(table.split('\n')[0]).toMatch(/NAME\s+STATE\s+PHASE\s+CPUS\s+RAM\s+NODE\s+IPADDRESS\s+AGE/);
    expect(table).toMatch(/defaults\s+Stopped/);
  });

  it("accepts the fields VM-Operator's CRD has and vmop does not act on, and stores its PVC defaults", async () => {
    const manifest = `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: parity, namespace: ${namespace}}
spec:
  pools: [lab]
  permissions:
  - {user: alice, may: [accessConsole, takeConsole]}
  - {role: admin, may: ['*']}
  vm:
    maximumCpus: 2
    display: {loggedInUser: alice}
    disks:
    - volumeClaimTemplate: {metadata: {name: system}, spec: {resources: {requests: {storage: 1Gi}}}}
`;
    const stored = JSON.parse(
      await kubectl(['apply', '--dry-run=server', '--validate=strict', '-o', 'json', '-f', '-'], manifest),
    );
    expect(stored.spec.pools).toEqual(['lab']);
    expect(stored.spec.permissions[0].may).toEqual(['accessConsole', 'takeConsole']);
    expect(stored.spec.vm.display.loggedInUser).toBe('alice');
    expect(stored.spec.vm.disks[0].volumeClaimTemplate.spec).toMatchObject({
      accessModes: ['ReadWriteOnce'],
      volumeMode: 'Block',
    });
  });

  it('refuses a permission with both a user and a role, as VM-Operator does', async () => {
    const manifest = vmManifest(namespace, 'perm', 'maximumCpus: 2').replace(
      'spec:\n',
      'spec:\n  permissions: [{user: a, role: b}]\n',
    );
    expect(await applyError(manifest)).toMatch(/spec\.permissions\[0\].*either a user or a role/);
  });

  it('refuses inline userData beside cloudInit.secretRef (it comes from the Secret); accepts secretRef with metaData, and sysprep', async () => {
    const withCloudInit = (cloudInit: string) =>
      vmManifest(namespace, 'provisioned', 'maximumCpus: 2').replace(
        'spec:\n',
        `spec:\n  cloudInit: ${cloudInit}\n`,
      );
    expect(await applyError(withCloudInit('{secretRef: {name: s}, userData: {a: 1}}'))).toMatch(
      /spec\.cloudInit\.secretRef.*userData and networkConfig come from the Secret/,
    );
    expect(
      await applyError(
        withCloudInit('{secretRef: {name: s}, metaData: {local-hostname: h}}').replace(
          'spec:\n',
          'spec:\n  sysprep: {secretRef: {name: answers}}\n',
        ),
      ),
    ).toBe('');
  });

  it('refuses a name longer than 52 characters, which no runner pod could carry in its labels', async () => {
    const longest = 'a'.repeat(52);
    expect(await applyError(vmManifest(namespace, longest, 'maximumCpus: 2'))).toBe('');
    const error = await applyError(vmManifest(namespace, `${longest}b`, 'maximumCpus: 2'));
    expect(error).toContain('the name must have at most 52 characters');
  });

  it.each([
    ['maximumCpus: 2\ncurrentCpus: 4', /spec\.vm\.currentCpus.*currentCpus must not exceed maximumCpus/],
    ['maximumRam: 1Gi\ncurrentRam: 2Gi', /spec\.vm\.currentRam.*currentRam must not exceed maximumRam/],
    [
      'disks:\n- cdrom: {image: ""}\n  volumeClaimTemplate: {metadata: {name: a}}',
      /spec\.vm\.disks\[0\].*exactly one of volumeClaimTemplate or cdrom/,
    ],
    [
      'disks:\n- volumeClaimTemplate: {metadata: {name: a}}\n- volumeClaimTemplate: {metadata: {name: a}}',
      /spec\.vm\.disks.*must be unique/,
    ],
    ['state: Paused', /spec\.vm\.state: Unsupported value: "Paused"/],
    ['currentRam: lots', /spec\.vm\.currentRam/],
    ['networks:\n- {}', /spec\.vm\.networks\[0\].*exactly one of tap or user/],
    ['maximumCpus: 2\ncpuTopology: {sockets: 1}', /specify either maximumCpus or cpuTopology/],
    ['powerdownTimeout: -1', /spec\.vm\.powerdownTimeout/],
  ])('rejects %j with a message naming the field', async (vmYaml, message) => {
    const error = await applyError(vmManifest(namespace, 'invalid', vmYaml));
    expect(error).toMatch(message);
  });
});
