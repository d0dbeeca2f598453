// The GUI's New VM form against a real apiserver with vmop's CRDs: the VM it makes is one the
// apiserver takes as the form says, and a refusal comes back told at the field it concerns.
import { CustomObjectsApi } from '@kubernetes/client-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { GROUP, PLURAL, VERSION } from '../../../src/api/virtual-machine.js';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { refusalStatus } from '../../../src/kube/clients.js';
import {
  formErrors,
  NewVmForm,
  rejectionErrors,
  vmOfForm,
  type FieldErrors,
} from '../../../src/web/create-form.js';
import { createTestNamespace, sharedKubeConfig } from '../../support/kube.js';

describe("the GUI's New VM form on a real apiserver", () => {
  let namespace: string;
  let api: CustomObjectsApi;
  const form = (fields: Partial<NewVmForm> = {}): NewVmForm =>
    NewVmForm.parse({
      namespace,
      name: 'from-form',
      cpus: 2,
      ram: '512Mi',
      firmware: 'bios',
      diskSize: '2Gi',
      source: { kind: 'url', url: 'https://images.example/debian-12.qcow2' },
      start: false,
      ...fields,
    });
  /** Creates `body`: undefined when it was made, the refusal by field when not. */
  const createVm = (body: object): Promise<FieldErrors | undefined> =>
    api
      .createNamespacedCustomObject({
        ...{ group: GROUP, version: VERSION, plural: PLURAL, namespace },
        body,
      })
      .then(
        () => undefined,
        (err: unknown) => {
          const refusal = refusalStatus(err);
          if (!refusal) throw err;
          return rejectionErrors(refusal);
        },
      );
  const create = (filled: NewVmForm) =>
    createVm(vmOfForm(filled, { 'vmoperator.jdrupes.org/requested-by': 'alice' }));

  beforeAll(async () => {
    const kubeConfig = sharedKubeConfig();
    await installCrds(kubeConfig);
    api = kubeConfig.makeApiClient(CustomObjectsApi);
    const ns = await createTestNamespace(kubeConfig, 'new-vm-form');
    namespace = ns.name;
    return ns.cleanup;
  });

  it('makes the VM the form describes: CPUs, RAM, firmware, a system disk filled from the URL, a NIC', async () => {
    expect(await create(form())).toBeUndefined();
    const made = (await api.getNamespacedCustomObject({
      ...{ group: GROUP, version: VERSION, plural: PLURAL, namespace, name: 'from-form' },
    })) as { metadata: { annotations: object }; spec: { vm: Record<string, unknown> } };
    expect(made.metadata.annotations).toEqual({ 'vmoperator.jdrupes.org/requested-by': 'alice' });
    expect(made.spec.vm).toMatchObject({
      state: 'Stopped',
      maximumCpus: 2,
      currentCpus: 2,
      maximumRam: '512Mi',
      currentRam: '512Mi',
      firmware: 'bios',
      networks: [{ user: {} }],
      disks: [
        {
          volumeClaimTemplate: {
            metadata: { name: 'system' },
            spec: { resources: { requests: { storage: '2Gi' } } },
          },
          bootindex: 0,
          source: { http: { url: 'https://images.example/debian-12.qcow2' } },
        },
      ],
    });
  });

  it("tells the apiserver's refusals at the form's fields: a cause it names a field of, a name taken", async () => {
    // The form always asks for as many CPUs as it may have; a VM written otherwise shows how a
    // cause with a field path (here a CEL rule's) comes back.
    const manifest = vmOfForm(form({ name: 'more-cpus' }), {});
    const tooMany = { ...manifest, spec: { vm: { ...manifest.spec.vm, currentCpus: 4 } } };
    expect(await createVm(tooMany)).toEqual({
      cpus: expect.stringContaining('currentCpus must not exceed maximumCpus'),
    });
    expect(await create(form())).toEqual({ name: 'a VM of this name exists in this namespace' });
  });

  it('refuses what the form itself can tell wrong, before the apiserver', () => {
    const checked = NewVmForm.safeParse({
      ...form(),
      name: 'Bad_Name',
      cpus: 0,
      source: { kind: 'url', url: 'ftp://x' },
    });
    expect(formErrors(checked.error!)).toEqual({
      name: 'lower-case letters, digits and dashes, starting and ending with a letter or digit',
      cpus: 'at least 1',
      source: 'an http:// or https:// URL',
    });
  });
});
