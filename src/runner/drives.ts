import { existsSync } from 'node:fs';
import path from 'node:path';
import type { VmConfig } from '../api/runner-config.js';
import { ConfigError } from './config-error.js';

/** A CD-ROM drive as the templates and the runner see it; `id` is the qemu device id. */
export interface CdDrive {
  id: string;
  index: number;
  /** The medium as configured ('' = empty). */
  image: string;
  /** The medium qemu opens: absolute path or URL; absent when empty. */
  file?: string;
  bootindex?: number;
}

export interface Disk {
  id: string;
  index: number;
  file?: string;
  device?: string;
  bootindex?: number;
}

/** Resolves a configured CD image: absolute path or URL as is, other names inside the image repository. */
export function resolveCdImage(image: string, imageRepository: string): string | undefined {
  if (image.trim() === '') return undefined;
  if (path.isAbsolute(image) || /^[a-z][a-z0-9+.-]*:\/\//i.test(image)) return image;
  return path.join(imageRepository, image);
}

export function cdDriveId(cdIndex: number): string {
  return `cd${cdIndex}`;
}

/** A raw drive's id, also its QEMU block node's name. */
export function diskId(diskIndex: number): string {
  return `disk${diskIndex}`;
}

export function cdDrives(vm: Pick<VmConfig, 'drives'>, imageRepository: string): CdDrive[] {
  return vm.drives
    .filter((drive) => drive.type === 'ide-cd')
    .map((drive, index) => ({
      id: cdDriveId(index),
      index,
      image: drive.file ?? '',
      file: resolveCdImage(drive.file ?? '', imageRepository),
      bootindex: drive.bootindex,
    }));
}

/** Raw drives; a `resource` that is a regular file is used as file, anything else as block device. */
export function disks(vm: Pick<VmConfig, 'drives'>, isRegularFile: (file: string) => boolean): Disk[] {
  return vm.drives
    .filter((drive) => drive.type === 'raw')
    .map((drive, index) => {
      const resource = drive.resource;
      const file = drive.file || (resource !== undefined && isRegularFile(resource) ? resource : undefined);
      const device = file ? undefined : drive.device || resource;
      return { id: diskId(index), index, file, device, bootindex: drive.bootindex };
    });
}

/** CD images that are files (not URLs) must exist before qemu starts, or qemu fails with less to say. */
export function checkCdImages(vm: Pick<VmConfig, 'drives'>, imageRepository: string): void {
  vm.drives.forEach((drive, index) => {
    if (drive.type !== 'ide-cd') return;
    const file = resolveCdImage(drive.file ?? '', imageRepository);
    if (file && path.isAbsolute(file) && !existsSync(file)) {
      throw new ConfigError(`vm.drives[${index}].file`, `CD image ${file} does not exist`);
    }
  });
}
