import type { RunnerSettings, VmConfig } from '../../api/runner-config.js';
import { ROUTED_TAP } from '../../api/vm-network.js';
import { cdDrives, disks, type CdDrive, type Disk } from '../drives.js';
import type { Firmware } from '../firmware.js';
import type { RunnerPaths } from '../paths.js';

/** The device id of the vmop agent's virtio-serial port; its VSERPORT_CHANGE tells that the guest booted. */
export const AGENT_PORT_ID = 'vmop-agent';
export const AGENT_PORT_NAME = 'org.jdrupes.vmop_agent.0';
/** The qemu-guest-agent's virtio-serial port (VSERPORT_CHANGE tells when the agent opens it). */
export const GUEST_AGENT_PORT_ID = 'channel0';
export const GUEST_AGENT_PORT_NAME = 'org.qemu.guest_agent.0';

/** What a template sees: the `vm` section (defaults applied, sizes in bytes) plus derived facts. */
export interface TemplateContext extends RunnerPaths {
  vm: VmConfig & { uuid: string; currentRam: number; cdroms: CdDrive[]; disks: Disk[] };
  firmwareRom?: string;
  firmwareVars?: string;
  /** Set when cloudInit is configured: the NoCloud image to attach. */
  cloudInit?: { image: string };
  /** Set when sysprepDir is configured: the CD image with the Windows answer files. */
  sysprep?: { image: string };
  hasDisplayPassword: boolean;
  agentPort: { id: string; name: string };
  guestAgentPort: { id: string; name: string };
  /** The pod's tap of a `routed` network (made by the node agent). */
  routedTap: string;
}

export function templateContext(input: {
  settings: RunnerSettings;
  paths: RunnerPaths;
  uuid: string;
  firmware: Firmware;
  hasDisplayPassword: boolean;
  isRegularFile: (file: string) => boolean;
}): TemplateContext {
  const { settings, paths, firmware } = input;
  const vm = settings.vm;
  return {
    ...paths,
    vm: {
      ...vm,
      uuid: input.uuid,
      currentRam: vm.currentRam ?? vm.maximumRam,
      cdroms: cdDrives(vm, paths.imageRepository),
      disks: disks(vm, input.isRegularFile),
    },
    firmwareRom: firmware.rom,
    firmwareVars: firmware.vars,
    cloudInit: settings.cloudInit ? { image: paths.cloudInitImage } : undefined,
    sysprep: settings.sysprepDir ? { image: paths.sysprepImage } : undefined,
    hasDisplayPassword: input.hasDisplayPassword,
    agentPort: { id: AGENT_PORT_ID, name: AGENT_PORT_NAME },
    guestAgentPort: { id: GUEST_AGENT_PORT_ID, name: GUEST_AGENT_PORT_NAME },
    routedTap: ROUTED_TAP,
  };
}
