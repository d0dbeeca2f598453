import type { Logger } from '../../util/logger.js';
import {
  deviceAdd,
  deviceDel,
  queryHotpluggableCpus,
  type HotpluggableCpu,
  type QmpExecutor,
} from '../qmp/commands.js';

/** Devices added with an id live under this QOM path; only those can be unplugged again. */
const PERIPHERAL = '/machine/peripheral/';

const slotOrder = (a: HotpluggableCpu, b: HotpluggableCpu) => {
  for (const key of ['node-id', 'socket-id', 'die-id', 'core-id', 'thread-id']) {
    const diff = (a.props[key] ?? 0) - (b.props[key] ?? 0);
    if (diff !== 0) return diff;
  }
  return 0;
};

/** The id a CPU for a free slot gets, e.g. vcpu-0-1-0 for socket 0, core 1, thread 0. */
function newCpuId(slot: HotpluggableCpu): string {
  const parts = ['socket-id', 'die-id', 'core-id', 'thread-id']
    .filter((key) => slot.props[key] !== undefined)
    .map((key) => slot.props[key]);
  return `vcpu-${parts.join('-')}`;
}

/** The device id of a hot-plugged CPU; undefined for CPUs qemu created at start. */
function pluggedCpuId(slot: HotpluggableCpu): string | undefined {
  const qomPath = slot['qom-path'];
  return qomPath?.startsWith(PERIPHERAL) ? qomPath.slice(PERIPHERAL.length) : undefined;
}

/**
 * Brings the number of vCPUs to a target by hot-plugging into the free slots qemu reports and
 * unplugging the hot-plugged ones (the boot CPU stays). Unplugging completes when the guest has
 * released the CPU (DEVICE_DELETED); until then the CPU counts as gone.
 */
export class CpuController {
  private readonly unplugging = new Set<string>();

  constructor(
    private readonly qmp: QmpExecutor,
    private readonly logger: Logger,
  ) {}

  /** Called on DEVICE_DELETED. */
  deviceDeleted(id: string | undefined) {
    if (id) this.unplugging.delete(id);
  }

  async setCpus(target: number): Promise<void> {
    const slots = (await queryHotpluggableCpus(this.qmp)).sort(slotOrder);
    const plugged = slots.filter((slot) => slot['qom-path'] !== undefined);
    const active = plugged.filter((slot) => !this.unplugging.has(pluggedCpuId(slot) ?? ''));
    let count = active.reduce((sum, slot) => sum + slot['vcpus-count'], 0);
    for (const slot of slots.filter((candidate) => candidate['qom-path'] === undefined)) {
      if (count >= target) break;
      const id = newCpuId(slot);
      await deviceAdd(this.qmp, slot.type, id, slot.props);
      count += slot['vcpus-count'];
      this.logger.info({ cpu: id, cpus: count }, 'CPU added');
    }
    for (const slot of [...active].reverse()) {
      const id = pluggedCpuId(slot);
      if (count <= target) break;
      if (!id) continue;
      await deviceDel(this.qmp, id);
      this.unplugging.add(id);
      count -= slot['vcpus-count'];
      this.logger.info({ cpu: id, cpus: count }, 'CPU removal requested');
    }
    if (count !== target)
      this.logger.warn({ target, cpus: count }, 'cannot reach the requested number of CPUs');
  }
}
