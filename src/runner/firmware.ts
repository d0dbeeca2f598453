import { copyFile, access } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { FIRMWARE_TYPES } from '../api/runner-config.js';

export type FirmwareType = (typeof FIRMWARE_TYPES)[number];

/** Candidate paths of the firmware code (rom) and variable store template (vars), first match wins. */
const CANDIDATES: Record<FirmwareType, { rom: string[]; vars: string[] }> = {
  bios: { rom: [], vars: [] },
  uefi: {
    rom: [
      '/usr/share/edk2/ovmf/OVMF_CODE.fd',
      '/usr/share/edk2/x64/OVMF_CODE.fd',
      '/usr/share/OVMF/OVMF_CODE.fd',
      // 4M builds as fallback when the small ones are not installed
      '/usr/share/edk2/ovmf-4m/OVMF_CODE.fd',
      '/usr/share/edk2/x64/OVMF_CODE.4m.fd',
      '/usr/share/OVMF/OVMF_CODE_4M.fd',
    ],
    vars: [
      '/usr/share/edk2/ovmf/OVMF_VARS.fd',
      '/usr/share/edk2/x64/OVMF_VARS.fd',
      '/usr/share/OVMF/OVMF_VARS.fd',
      '/usr/share/edk2/ovmf-4m/OVMF_VARS.fd',
      '/usr/share/edk2/x64/OVMF_VARS.4m.fd',
      '/usr/share/OVMF/OVMF_VARS_4M.fd',
    ],
  },
  'uefi-4m': {
    rom: [
      '/usr/share/edk2/ovmf-4m/OVMF_CODE.fd',
      '/usr/share/edk2/x64/OVMF_CODE.4m.fd',
      '/usr/share/OVMF/OVMF_CODE_4M.fd',
    ],
    vars: [
      '/usr/share/edk2/ovmf-4m/OVMF_VARS.fd',
      '/usr/share/edk2/x64/OVMF_VARS.4m.fd',
      '/usr/share/OVMF/OVMF_VARS_4M.fd',
    ],
  },
  secure: {
    rom: [
      '/usr/share/edk2/ovmf/OVMF_CODE.secboot.fd',
      '/usr/share/edk2/x64/OVMF_CODE.secboot.fd',
      '/usr/share/OVMF/OVMF_CODE.secboot.fd',
    ],
    vars: [
      '/usr/share/edk2/ovmf/OVMF_VARS.secboot.fd',
      '/usr/share/edk2/x64/OVMF_VARS.fd',
      '/usr/share/OVMF/OVMF_VARS.ms.fd',
    ],
  },
  'secure-4m': {
    rom: [
      '/usr/share/edk2/ovmf-4m/OVMF_CODE.secboot.fd',
      '/usr/share/edk2/x64/OVMF_CODE.secboot.4m.fd',
      '/usr/share/OVMF/OVMF_CODE_4M.secboot.fd',
    ],
    vars: [
      '/usr/share/edk2/ovmf-4m/OVMF_VARS.fd',
      '/usr/share/edk2/x64/OVMF_VARS.4m.fd',
      '/usr/share/OVMF/OVMF_VARS_4M.ms.fd',
    ],
  },
};

export interface Firmware {
  /** Absent for bios (qemu's built-in SeaBIOS). */
  rom?: string;
  /** The VM's own copy of the variable store, in its data directory. */
  vars?: string;
}

/**
 * Finds the firmware files and, on first start, copies the variable store template into the data
 * directory (the VM writes its UEFI variables there, so every VM needs its own).
 */
export async function prepareFirmware(type: FirmwareType, dataDir: string): Promise<Firmware> {
  const candidates = CANDIDATES[type];
  if (candidates.rom.length === 0) return {};
  const rom = candidates.rom.find((file) => existsSync(file));
  const varsTemplate = candidates.vars.find((file) => existsSync(file));
  if (!rom || !varsTemplate) {
    throw new Error(
      `firmware "${type}" not found (tried ${[...candidates.rom, ...candidates.vars].join(', ')}); install OVMF`,
    );
  }
  const vars = path.join(dataDir, 'fw-vars.fd');
  const present = await access(vars).then(
    () => true,
    () => false,
  );
  if (!present) await copyFile(varsTemplate, vars);
  return { rom, vars };
}
