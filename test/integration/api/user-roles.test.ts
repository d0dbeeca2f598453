// vmop's ClusterRoles for people on a real apiserver and controller-manager (its aggregation
// controller): a namespace editor (the built-in `edit`, nothing hand-made) runs VMs in her namespace
// and nowhere else, cannot write what the managers write (statuses) and cannot read the leases.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installCrds, installUserRoles } from '../../../src/devenv/install-crds.js';
import { eventually } from '../../support/eventually.js';
import { createTestNamespace, kubectl, sharedKubeConfig, type TestNamespace } from '../../support/kube.js';

const PERSON = 'erin';

describe("people's roles: vmop's kinds aggregated into view, edit and admin", () => {
  let mine: TestNamespace;
  let other: TestNamespace;
  /** kubectl as erin: `yes` or `no` for `auth can-i`. */
  const can = async (...args: string[]) =>
    (
      await kubectl(['auth', 'can-i', '--as', PERSON, ...args]).catch(
        (err: { stdout?: string }) => err.stdout ?? '',
      )
    ).trim();

  beforeAll(async () => {
    const kubeConfig = sharedKubeConfig();
    await installCrds(kubeConfig);
    await installUserRoles(kubeConfig);
    await installUserRoles(kubeConfig); // idempotent
    mine = await createTestNamespace(kubeConfig, 'roles-mine');
    other = await createTestNamespace(kubeConfig, 'roles-other');
    await kubectl([
      'create',
      'rolebinding',
      'erin-edit',
      '-n',
      mine.name,
      '--clusterrole=edit',
      `--user=${PERSON}`,
    ]);
    await kubectl([
      'create',
      'rolebinding',
      'erin-view',
      '-n',
      other.name,
      '--clusterrole=view',
      `--user=${PERSON}`,
    ]);
  });
  afterAll(async () => {
    await mine?.cleanup();
    await other?.cleanup();
  });

  it('an editor runs VMs, operations, images, snapshots, restores, clones, exports, pools and addresses in her namespace; a viewer only reads', async () => {
    for (const kind of [
      'vms',
      'virtualmachineoperations',
      'virtualmachineimages',
      'virtualmachinesnapshots',
      'virtualmachinerestores',
      'virtualmachineclones',
      'virtualmachineexports',
      'virtualmachinesnapshotschedules',
      'vmpools',
      'virtualmachineipaddresses',
    ])
      // The aggregation controller fills `edit` and `view` shortly after the roles appear.
      await eventually(async () => {
        expect(await can('create', `${kind}.vmoperator.jdrupes.org`, '-n', mine.name)).toBe('yes');
        expect(await can('delete', `${kind}.vmoperator.jdrupes.org`, '-n', mine.name)).toBe('yes');
        expect(await can('list', `${kind}.vmoperator.jdrupes.org`, '-n', other.name)).toBe('yes');
      }, 30_000);
    await kubectl(
      ['apply', '--as', PERSON, '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: hers, namespace: ${mine.name}}
spec: {vm: {maximumCpus: 1}}
`,
    );
    expect(await kubectl(['get', 'vm', '-n', mine.name, 'hers', '--as', PERSON, '-o', 'name'])).toContain(
      'hers',
    );
  });

  it('nothing more: no writes where she views, no statuses, no leases, no classes', async () => {
    expect(await can('create', 'vms.vmoperator.jdrupes.org', '-n', other.name)).toBe('no');
    for (const kind of [
      'vms',
      'virtualmachineipaddresses',
      'virtualmachineoperations',
      // A Ready snapshot or a Completed restore is the managers' word.
      'virtualmachinesnapshots',
      'virtualmachinerestores',
      'virtualmachineclones',
      // An export's URLs and expiry too.
      'virtualmachineexports',
      'virtualmachinesnapshotschedules',
    ])
      expect(
        await can('patch', `${kind}.vmoperator.jdrupes.org`, '--subresource=status', '-n', mine.name),
      ).toBe('no');
    expect(await can('list', 'virtualmachineipaddressleases.vmoperator.jdrupes.org')).toBe('no');
    expect(await can('create', 'virtualmachineclasses.vmoperator.jdrupes.org')).toBe('no');
    // The apiserver refuses her status write, whatever she sends.
    const refused = await kubectl([
      'patch',
      'vm',
      'hers',
      '-n',
      mine.name,
      '--as',
      PERSON,
      '--subresource=status',
      '--type=merge',
      '-p',
      '{"status":{"ipAddress":"10.66.10.196"}}',
    ]).catch((err: { stderr?: string }) => err.stderr ?? '');
    expect(refused).toMatch(/forbidden/);
  });
});
