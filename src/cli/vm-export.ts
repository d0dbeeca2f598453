// `vmop vm export NAME`: makes a VirtualMachineExport of a stopped VM (or of a snapshot), waits
// until it serves, and either downloads one disk through the apiserver (a port-forward to the
// export's pod: the user's own credentials, no address of the cluster's needed) or prints the URLs
// pods in the cluster (a VM's `source.http`, say) can fetch with the token, until it expires.
import type { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { open } from 'node:fs/promises';
import { API_VERSION, GROUP, PLURAL, VERSION } from '../api/virtual-machine.js';
import {
  EXPORT_KIND,
  EXPORT_PLURAL,
  EXPORT_TOKEN_HEADER,
  VirtualMachineExport,
  exportDiskPath,
  isExportDone,
  type ExportFormat,
} from '../api/virtual-machine-export.js';
import { SNAPSHOT_PLURAL } from '../api/virtual-machine-snapshot.js';
import { getFromExportServer } from '../export/client.js';
import { SparseWriter } from '../export/sparse-writer.js';
import { CliFailure, fail } from './failure.js';
import { mustExist } from './vm-snapshots.js';
import { formatDuration } from '../util/table.js';
import { phaseAndMessage, pollUntil } from './follow-status.js';

export interface ExportCliOptions {
  snapshot?: string;
  disk?: string;
  format: ExportFormat;
  output?: string;
  ttl: string;
  name?: string;
  keep?: boolean;
  timeout: number;
}

/** A download that breaks off resumes where it stopped (a Range request), this often. */
const RESUMES = 5;

/** The export once it serves; fails, saying why, when it ended without serving. */
async function waitUntilServing(
  name: string,
  read: () => Promise<VirtualMachineExport>,
  timeoutMs: number,
): Promise<VirtualMachineExport> {
  const ready = (vmExport: VirtualMachineExport) => vmExport.status?.phase === 'Ready';
  const vmExport = await pollUntil(name, read, (e) => ready(e) || isExportDone(e), timeoutMs, {
    narrate: true,
  });
  if (!ready(vmExport)) fail(phaseAndMessage(name, vmExport));
  return vmExport;
}

async function download(
  kubeConfig: KubeConfig,
  vmExport: VirtualMachineExport,
  token: string,
  disk: string,
  format: ExportFormat,
  output: string,
): Promise<number> {
  const { name, namespace } = vmExport.metadata;
  const certificate = vmExport.status?.certificate;
  if (!certificate) fail(`${name} has no certificate in its status yet`);
  const file = await open(output, 'w');
  try {
    const writer = new SparseWriter(file, format === 'raw');
    for (let attempt = 0; ; attempt++) {
      const from = writer.written;
      const { response, close } = await getFromExportServer(kubeConfig, {
        namespace: namespace!,
        exportName: name,
        path: exportDiskPath(disk, format),
        token,
        certificate,
        ...(from > 0 && { range: `bytes=${from}-` }),
      });
      try {
        if (response.statusCode !== (from > 0 ? 206 : 200)) {
          let body = '';
          for await (const chunk of response) body += String(chunk);
          fail(`downloading ${disk}.${format}: HTTP ${response.statusCode}: ${body.trim().slice(0, 300)}`);
        }
        for await (const chunk of response) await writer.write(chunk as Buffer);
        await writer.finish();
        return writer.written;
      } catch (err) {
        if (err instanceof CliFailure || attempt >= RESUMES) throw err;
        console.error(
          `the download broke off at ${writer.written} bytes (${(err as Error).message}); resuming`,
        );
      } finally {
        close();
      }
    }
  } finally {
    await file.close();
  }
}

export async function exportDisks(
  kubeConfig: KubeConfig,
  api: CustomObjectsApi,
  readToken: (secret: string) => Promise<string>,
  namespace: string,
  vmName: string,
  options: ExportCliOptions,
): Promise<void> {
  if (options.snapshot)
    await mustExist(api, namespace, SNAPSHOT_PLURAL, options.snapshot, 'VirtualMachineSnapshot');
  else await mustExist(api, namespace, PLURAL, vmName, 'VirtualMachine');
  const ref = { group: GROUP, version: VERSION, plural: EXPORT_PLURAL, namespace };
  const created = VirtualMachineExport.parse(
    await api.createNamespacedCustomObject({
      ...ref,
      body: {
        apiVersion: API_VERSION,
        kind: EXPORT_KIND,
        metadata: options.name ? { name: options.name } : { generateName: `${vmName}-export-` },
        spec: {
          source: options.snapshot
            ? { virtualMachineSnapshotName: options.snapshot }
            : { virtualMachineName: vmName },
          ...(options.disk && { disks: [options.disk] }),
          ttl: options.ttl,
        },
      },
    }),
  );
  const name = created.metadata.name;
  const what = options.snapshot ? `snapshot ${options.snapshot}` : `VM ${vmName}`;
  console.error(`virtualmachineexport/${name} created (of ${namespace}/${what})`);
  const remove = () => api.deleteNamespacedCustomObject({ ...ref, name }).catch(() => undefined);
  try {
    const ready = await waitUntilServing(
      name,
      async () => VirtualMachineExport.parse(await api.getNamespacedCustomObject({ ...ref, name })),
      options.timeout,
    );
    const disks = ready.status?.disks ?? [];
    const token = await readToken(ready.status!.tokenSecretName!);
    if (!options.output) {
      console.log(
        `Until ${ready.status?.expiresAt}, pods in the cluster download (token in ?token= or the ${EXPORT_TOKEN_HEADER} header):`,
      );
      for (const disk of disks)
        for (const [format, url] of Object.entries(disk.urls ?? {}))
          console.log(`  ${disk.name} (${format}): ${url}?token=${token}`);
      console.log(
        `The server's certificate (a VM's source.http.caCertificate, curl --cacert): kubectl get vmexport ${name} -n ${namespace} -o jsonpath='{.status.certificate}'`,
      );
      return;
    }
    const disk = options.disk ?? (disks.length === 1 ? disks[0]!.name : undefined);
    if (!disk)
      fail(
        `${what} has ${disks.length} disks (${disks.map((d) => d.name).join(', ')}): name one with --disk`,
      );
    const started = Date.now();
    const bytes = await download(kubeConfig, ready, token, disk, options.format, options.output);
    console.error(
      `${disk}.${options.format}: ${bytes} bytes written to ${options.output} in ${formatDuration(Date.now() - started)}`,
    );
    if (!options.keep) await remove();
  } catch (err) {
    if (!options.keep && options.output) await remove();
    throw err;
  }
}
