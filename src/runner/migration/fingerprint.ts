// What must be the same in the source's and the target's QEMU for the guest's state to fit: the
// machine type (a newer QEMU may resolve an alias like `q35` to a newer one), the RAM, and every
// device with its type. Each runner asks its own QEMU; the target compares before it takes the
// state in, so a mismatch is refused with what differs instead of failing inside QEMU's stream.
import { z } from 'zod';
import type { QmpExecutor } from '../qmp/commands.js';

export const MachineFingerprint = z.object({
  machine: z.string(),
  ramBytes: z.number().int(),
  /** `path/name: type` of each device (named ones under peripheral, the others under peripheral-anon). */
  devices: z.array(z.string()),
});
export type MachineFingerprint = z.infer<typeof MachineFingerprint>;

const QomProperty = z.object({ name: z.string(), type: z.string() });
const CHILD = /^child<(.+)>$/;
const DEVICE_CONTAINERS = ['peripheral', 'peripheral-anon'];

/** The fingerprint of the QEMU behind `qmp` (with the CPUs plugged in that it has now). */
export async function machineFingerprint(qmp: QmpExecutor): Promise<MachineFingerprint> {
  const machine = z.string().parse(await qmp.execute('qom-get', { path: '/machine', property: 'type' }));
  const memory = z
    .object({ 'base-memory': z.number() })
    .parse(await qmp.execute('query-memory-size-summary'));
  const devices: string[] = [];
  for (const container of DEVICE_CONTAINERS) {
    const children = z
      .array(QomProperty)
      .parse(await qmp.execute('qom-list', { path: `/machine/${container}` }));
    for (const { name, type } of children) {
      const device = CHILD.exec(type)?.[1];
      if (device) devices.push(`${container}/${name}: ${device}`);
    }
  }
  return { machine, ramBytes: memory['base-memory'], devices: devices.sort() };
}

/** What differs between the source's QEMU and this one, in words; undefined when they fit. */
export function fingerprintMismatch(
  source: MachineFingerprint,
  here: MachineFingerprint,
): string | undefined {
  const differences: string[] = [];
  if (source.machine !== here.machine)
    differences.push(`machine ${here.machine} here, ${source.machine} at the source`);
  if (source.ramBytes !== here.ramBytes)
    differences.push(`${here.ramBytes} bytes of RAM here, ${source.ramBytes} at the source`);
  const [there, ours] = [new Set(source.devices), new Set(here.devices)];
  const onlyThere = source.devices.filter((device) => !ours.has(device));
  const onlyHere = here.devices.filter((device) => !there.has(device));
  if (onlyThere.length > 0) differences.push(`only at the source: ${onlyThere.join(', ')}`);
  if (onlyHere.length > 0) differences.push(`only here: ${onlyHere.join(', ')}`);
  return differences.length > 0
    ? `the target's QEMU does not match the source's (${differences.join('; ')})`
    : undefined;
}
