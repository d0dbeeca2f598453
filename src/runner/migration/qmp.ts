// The QMP commands of a live migration (QEMU 7.2 and later): TLS credentials, capabilities and
// parameters, the incoming side (`-incoming defer`), block mirrors to the target's NBD exports for
// disks the target does not share, and what a finished migration tells.
import { z } from 'zod';
import type { QmpExecutor } from '../qmp/commands.js';

/** The id of the TLS credentials object both QEMUs make (a PSK: the same key on both sides). */
export const TLS_CREDS_ID = 'vmop-migration-tls';

/** TLS-PSK credentials from the key file in `dir` (a migration's by default; attached disks have their own id). */
export async function addPskCredentials(
  qmp: QmpExecutor,
  endpoint: 'server' | 'client',
  dir: string,
  username: string,
  id = TLS_CREDS_ID,
): Promise<void> {
  // A QEMU that came in by migration (or tried to send before) has them already, maybe as the
  // other endpoint: made anew, with the key as it is now.
  await qmp.execute('object-del', { id }).catch(() => undefined);
  await qmp.execute('object-add', {
    'qom-type': 'tls-creds-psk',
    id,
    endpoint,
    dir,
    ...(endpoint === 'client' && { username }),
  });
}

export async function setCapabilities(qmp: QmpExecutor, names: string[]): Promise<void> {
  await qmp.execute('migrate-set-capabilities', {
    capabilities: names.map((capability) => ({ capability, state: true })),
  });
}

export async function setParameters(qmp: QmpExecutor, parameters: Record<string, unknown>) {
  await qmp.execute('migrate-set-parameters', parameters);
}

export const MigrationStatus = z.enum([
  'none',
  'setup',
  'cancelling',
  'cancelled',
  'active',
  'postcopy-active',
  'postcopy-paused',
  'postcopy-recover-setup',
  'postcopy-recover',
  'completed',
  'failed',
  'colo',
  'pre-switchover',
  'device',
  'wait-unplug',
]);
export type MigrationStatus = z.infer<typeof MigrationStatus>;

export const MigrationInfo = z.object({
  status: MigrationStatus.optional(),
  'total-time': z.number().optional(),
  downtime: z.number().optional(),
  'expected-downtime': z.number().optional(),
  'setup-time': z.number().optional(),
  ram: z.object({ transferred: z.number(), remaining: z.number(), total: z.number() }).optional(),
  'error-desc': z.string().optional(),
  'blocked-reasons': z.array(z.string()).optional(),
});
export type MigrationInfo = z.infer<typeof MigrationInfo>;

export async function queryMigrate(qmp: QmpExecutor): Promise<MigrationInfo> {
  const parsed = MigrationInfo.safeParse(await qmp.execute('query-migrate'));
  if (!parsed.success) throw new Error(`unexpected reply to query-migrate: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}

export async function migrateIncoming(qmp: QmpExecutor, port: number): Promise<void> {
  await qmp.execute('migrate-incoming', { uri: `tcp:0.0.0.0:${port}` });
}

export async function migrate(qmp: QmpExecutor, host: string, port: number): Promise<void> {
  await qmp.execute('migrate', { uri: `tcp:${host}:${port}` });
}

export async function migrateContinue(qmp: QmpExecutor): Promise<void> {
  await qmp.execute('migrate-continue', { state: 'pre-switchover' });
}

export async function migrateCancel(qmp: QmpExecutor): Promise<void> {
  await qmp.execute('migrate_cancel');
}

const NamedBlockNode = z.object({ 'node-name': z.string(), file: z.string(), drv: z.string() });

const FORMATS = new Set(['raw', 'qcow2']);

/** The format nodes (those devices attach to). */
async function namedFormatNodes(qmp: QmpExecutor) {
  const nodes = z.array(NamedBlockNode).parse(await qmp.execute('query-named-block-nodes', { flat: true }));
  return nodes.filter((node) => FORMATS.has(node.drv));
}

/** The format node whose host-side file or device is `file`. */
export async function blockNodeOf(qmp: QmpExecutor, file: string): Promise<string | undefined> {
  return (await namedFormatNodes(qmp)).find((node) => node.file === file)?.['node-name'];
}

/** The names of the format nodes. */
export async function formatNodes(qmp: QmpExecutor): Promise<string[]> {
  return (await namedFormatNodes(qmp)).map((node) => node['node-name']);
}

/** The target: an NBD server (with the TLS credentials) exporting `nodes` writable. */
export async function exportForMirror(qmp: QmpExecutor, port: number, nodes: string[]): Promise<void> {
  await qmp.execute('nbd-server-start', {
    addr: { type: 'inet', data: { host: '0.0.0.0', port: String(port) } },
    'tls-creds': TLS_CREDS_ID,
  });
  for (const node of nodes)
    await qmp.execute('block-export-add', { type: 'nbd', id: node, 'node-name': node, writable: true });
}

export async function stopNbdServer(qmp: QmpExecutor): Promise<void> {
  await qmp.execute('nbd-server-stop');
}

/** The source: a mirror of `node` (whole, as it is now and as it changes) into the target's export. */
export async function mirrorTo(
  qmp: QmpExecutor,
  node: string,
  target: { host: string; port: number; export: string },
): Promise<string> {
  const targetNode = `${node}-migration-target`;
  await qmp.execute('blockdev-add', {
    driver: 'nbd',
    'node-name': targetNode,
    server: { type: 'inet', host: target.host, port: String(target.port) },
    export: target.export,
    'tls-creds': TLS_CREDS_ID,
  });
  const job = `${node}-migration-mirror`;
  await qmp.execute('blockdev-mirror', { 'job-id': job, device: node, target: targetNode, sync: 'full' });
  return job;
}

/**
 * Ends a mirror that is READY leaving the target a consistent copy (the source keeps its disk):
 * block-job-cancel after READY completes without pivoting.
 */
export async function finishMirror(qmp: QmpExecutor, job: string): Promise<void> {
  await qmp.execute('block-job-cancel', { device: job });
}

/** Drops a mirror's target node (after the job ended). */
export async function removeMirrorTarget(qmp: QmpExecutor, node: string): Promise<void> {
  await qmp.execute('blockdev-del', { 'node-name': `${node}-migration-target` });
}

const BlockJob = z.object({
  device: z.string(),
  ready: z.boolean().optional(),
  offset: z.number(),
  len: z.number(),
});

export async function queryBlockJobs(qmp: QmpExecutor): Promise<Array<z.infer<typeof BlockJob>>> {
  return z.array(BlockJob).parse(await qmp.execute('query-block-jobs'));
}
