import { z } from 'zod';

/** The part of the QMP client the command wrappers need. */
export interface QmpExecutor {
  execute<T = unknown>(
    command: string,
    args?: Record<string, unknown>,
    opts?: { timeoutMs?: number },
  ): Promise<T>;
}

async function executeParsed<T extends z.ZodType>(
  qmp: QmpExecutor,
  schema: T,
  command: string,
  args?: Record<string, unknown>,
): Promise<z.infer<T>> {
  const reply = await qmp.execute(command, args);
  const result = schema.safeParse(reply);
  if (!result.success) {
    throw new Error(`unexpected reply to ${command}: ${z.prettifyError(result.error)}`);
  }
  return result.data;
}

export const HotpluggableCpu = z.object({
  type: z.string(),
  'vcpus-count': z.number(),
  props: z.record(z.string(), z.number()),
  /** Present when a CPU occupies the slot. */
  'qom-path': z.string().optional(),
});
export type HotpluggableCpu = z.infer<typeof HotpluggableCpu>;

export function queryHotpluggableCpus(qmp: QmpExecutor): Promise<HotpluggableCpu[]> {
  return executeParsed(qmp, z.array(HotpluggableCpu), 'query-hotpluggable-cpus');
}

const CpuInfoFast = z.object({ 'cpu-index': z.number(), 'qom-path': z.string() });

export async function queryCpuCount(qmp: QmpExecutor): Promise<number> {
  return (await executeParsed(qmp, z.array(CpuInfoFast), 'query-cpus-fast')).length;
}

export async function deviceAdd(
  qmp: QmpExecutor,
  driver: string,
  id: string,
  props: Record<string, unknown>,
) {
  await qmp.execute('device_add', { ...props, driver, id });
}

/** Starts an unplug; qemu emits DEVICE_DELETED once the guest has released the device. */
export async function deviceDel(qmp: QmpExecutor, id: string) {
  await qmp.execute('device_del', { id });
}

/** Asks the guest's balloon driver to give the VM `bytes` of RAM. */
export async function balloon(qmp: QmpExecutor, bytes: number) {
  await qmp.execute('balloon', { value: bytes });
}

export async function queryBalloon(qmp: QmpExecutor): Promise<number> {
  return (await executeParsed(qmp, z.object({ actual: z.number() }), 'query-balloon')).actual;
}

export async function setPassword(qmp: QmpExecutor, protocol: string, password: string) {
  await qmp.execute('set_password', { protocol, password });
}

/** time: "now", "never", "+SECONDS" or seconds since the epoch. */
export async function expirePassword(qmp: QmpExecutor, protocol: string, time: string) {
  await qmp.execute('expire_password', { protocol, time });
}

/** Opens the tray; when the guest has locked it, qemu asks the guest to eject and the tray opens later. */
export async function blockdevOpenTray(qmp: QmpExecutor, id: string) {
  await qmp.execute('blockdev-open-tray', { id });
}

/** Replaces the medium (opening and closing the tray); fails when the tray is locked. */
export async function blockdevChangeMedium(qmp: QmpExecutor, id: string, filename: string) {
  await qmp.execute('blockdev-change-medium', { id, filename, format: 'raw', 'read-only-mode': 'read-only' });
}

/** Removes the medium; the tray must be open. */
export async function blockdevRemoveMedium(qmp: QmpExecutor, id: string) {
  await qmp.execute('blockdev-remove-medium', { id });
}

const BlockNode = z.object({
  'node-name': z.string(),
  image: z.object({ 'virtual-size': z.number() }),
});

/** The size the guest sees of block node `nodeName`; undefined when there is no such node. */
export async function blockNodeSize(qmp: QmpExecutor, nodeName: string): Promise<number | undefined> {
  const nodes = await executeParsed(qmp, z.array(BlockNode.passthrough()), 'query-named-block-nodes', {
    flat: true,
  });
  return nodes.find((node) => node['node-name'] === nodeName)?.image['virtual-size'];
}

/** Gives the guest `bytes` of block node `nodeName` (a device's node: at most what the device has). */
export async function blockResize(qmp: QmpExecutor, nodeName: string, bytes: number) {
  await qmp.execute('block_resize', { 'node-name': nodeName, size: bytes });
}

const BlockInfo = z.object({
  device: z.string(),
  qdev: z.string().optional(),
  locked: z.boolean(),
  tray_open: z.boolean().optional(),
  inserted: z.object({ file: z.string() }).optional(),
});
export type BlockInfo = z.infer<typeof BlockInfo>;

export function queryBlock(qmp: QmpExecutor): Promise<BlockInfo[]> {
  return executeParsed(qmp, z.array(BlockInfo), 'query-block');
}

export async function cont(qmp: QmpExecutor) {
  await qmp.execute('cont');
}

/** Presses the ACPI power button. */
export async function systemPowerdown(qmp: QmpExecutor) {
  await qmp.execute('system_powerdown');
}

/** A hard reset, as the machine's reset button. */
export async function systemReset(qmp: QmpExecutor) {
  await qmp.execute('system_reset');
}

export async function quit(qmp: QmpExecutor) {
  await qmp.execute('quit');
}
