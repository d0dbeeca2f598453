// The runner's /metrics: what its VM uses, named as KubeVirt's kubevirt_vmi_* series
// (kubevirt_vmi_storage_read_traffic_bytes_total → vmop_vm_storage_read_traffic_bytes_total), so a
// KubeVirt user's queries carry over. Every series has the VM's namespace, name and node; devices
// add the runner's own ids (drive, interface, vCPU), which are bounded by the VM's config.
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { DriveUsage, InterfaceUsage, VmUsage } from './usage.js';

/** Several metrics are collected for one scrape: they share what was asked within this time. */
const SAMPLE_REUSE_MS = 1_000;

export interface VmIdentity {
  namespace: string;
  name: string;
  node: string;
}

type Sample = () => Promise<VmUsage | undefined>;

function shared(sample: Sample): Sample {
  let last: { at: number; usage: Promise<VmUsage | undefined> } | undefined;
  return () => {
    if (!last || Date.now() - last.at > SAMPLE_REUSE_MS)
      last = { at: Date.now(), usage: sample().catch(() => undefined) };
    return last.usage;
  };
}

/** A series per device: its name after vmop_vm_, its help, its value of a device. */
type DeviceSeries<D> = [string, string, (device: D) => number][];

const VCPU_SERIES: DeviceSeries<VmUsage['vcpuSeconds'][number]> = [
  ['vcpu_seconds_total', "CPU time of each vCPU's thread", (vcpu) => vcpu.seconds],
];

const DRIVE_SERIES: DeviceSeries<DriveUsage> = [
  ['storage_read_traffic_bytes_total', 'Bytes read from the drive', (d) => d.readBytes],
  ['storage_write_traffic_bytes_total', 'Bytes written to the drive', (d) => d.writeBytes],
  ['storage_iops_read_total', 'Read operations on the drive', (d) => d.readOperations],
  ['storage_iops_write_total', 'Write operations on the drive', (d) => d.writeOperations],
  ['storage_flush_requests_total', 'Flushes of the drive', (d) => d.flushOperations],
  ['storage_read_times_seconds_total', 'Time spent reading from the drive', (d) => d.readSeconds],
  ['storage_write_times_seconds_total', 'Time spent writing to the drive', (d) => d.writeSeconds],
  ['storage_flush_times_seconds_total', 'Time spent flushing the drive', (d) => d.flushSeconds],
];

const INTERFACE_SERIES: DeviceSeries<InterfaceUsage> = [
  ['network_receive_bytes_total', 'Bytes the guest received on the interface', (i) => i.receiveBytes],
  ['network_transmit_bytes_total', 'Bytes the guest sent on the interface', (i) => i.transmitBytes],
  ['network_receive_packets_total', 'Packets the guest received', (i) => i.receivePackets],
  ['network_transmit_packets_total', 'Packets the guest sent', (i) => i.transmitPackets],
  ['network_receive_errors_total', 'Receive errors', (i) => i.receiveErrors],
  ['network_transmit_errors_total', 'Transmit errors', (i) => i.transmitErrors],
  ['network_receive_packets_dropped_total', 'Received packets dropped', (i) => i.receiveDropped],
  ['network_transmit_packets_dropped_total', 'Sent packets dropped', (i) => i.transmitDropped],
];

const VM_GAUGES: [string, string, (u: VmUsage) => number | undefined][] = [
  [
    'memory_resident_bytes',
    "QEMU's resident memory (what the VM takes from the node)",
    (u) => u.residentBytes,
  ],
  ['memory_domain_bytes', 'The RAM the guest has now (after the balloon)', (u) => u.domainBytes],
  ['memory_available_bytes', 'The RAM the guest kernel manages (MemTotal)', (u) => u.guestMemory.totalBytes],
  ['memory_unused_bytes', 'The RAM the guest leaves unused (MemFree)', (u) => u.guestMemory.unusedBytes],
  [
    'memory_usable_bytes',
    'The RAM the guest could give its programs without swapping (MemAvailable)',
    (u) => u.guestMemory.availableBytes,
  ],
  ['guest_agent_connected', '1 while the guest agent answers', (u) => (u.guestAgentConnected ? 1 : 0)],
  ['uptime_seconds', 'Seconds since the guest was let run in this runner pod', (u) => u.uptimeSeconds],
];

/** A registry with the VM's series and the runner process's own (process_*, nodejs_*). */
export function vmUsageRegistry(identity: VmIdentity, sampleUsage: Sample): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ ...identity });
  collectDefaultMetrics({ register: registry });
  const sample = shared(sampleUsage);
  const registers = [registry];

  new Counter({
    name: 'vmop_vm_cpu_usage_seconds_total',
    help: "CPU time QEMU used for the VM (its vCPUs and QEMU's own work for them)",
    registers,
    async collect() {
      const usage = await sample();
      this.reset();
      if (usage) this.inc(usage.cpuSeconds);
    },
  });
  for (const [suffix, help, value] of VM_GAUGES) {
    new Gauge({
      name: `vmop_vm_${suffix}`,
      help,
      registers,
      async collect() {
        const usage = await sample();
        this.reset();
        const v = usage && value(usage);
        if (v !== undefined) this.set(v);
      },
    });
  }
  /** Counters with one series per device of the VM, labelled `label` with the device's id. */
  function perDevice<D>(
    label: string,
    devices: (usage: VmUsage) => D[],
    id: (device: D) => string,
    series: DeviceSeries<D>,
  ) {
    for (const [suffix, help, value] of series) {
      new Counter({
        name: `vmop_vm_${suffix}`,
        help,
        labelNames: [label],
        registers,
        async collect() {
          const usage = await sample();
          this.reset();
          for (const device of usage ? devices(usage) : []) this.inc({ [label]: id(device) }, value(device));
        },
      });
    }
  }
  perDevice(
    'id',
    (usage) => usage.vcpuSeconds,
    (vcpu) => String(vcpu.id),
    VCPU_SERIES,
  );
  perDevice(
    'drive',
    (usage) => usage.drives,
    (drive) => drive.drive,
    DRIVE_SERIES,
  );
  perDevice(
    'interface',
    (usage) => usage.interfaces,
    (itf) => itf.interface,
    INTERFACE_SERIES,
  );
  return registry;
}
