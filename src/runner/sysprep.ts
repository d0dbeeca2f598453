// The sysprep medium: an ISO 9660 image (Joliet and Rock Ridge, so the names stay lower case)
// with the answer files of a Secret, attached as a CD-ROM: Windows Setup reads autounattend.xml
// from the root of removable media, and a CD needs no driver.
import { execFile } from 'node:child_process';
import { access, rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { SYSPREP_FILES } from '../api/provisioning.js';
import { ConfigError } from './config-error.js';
import { requireExecutable } from './executable.js';

const run = promisify(execFile);

export async function buildSysprepImage(image: string, secretDir: string, searchPath?: string) {
  const present: string[] = [];
  for (const name of SYSPREP_FILES) {
    const file = path.join(secretDir, name);
    if (
      await access(file).then(
        () => true,
        () => false,
      )
    )
      present.push(file);
  }
  if (present.length === 0) {
    throw new ConfigError(
      'sysprepDir',
      `the sysprep Secret has no ${SYSPREP_FILES.join(' or ')} (in ${secretDir})`,
    );
  }
  const mkisofs = requireExecutable('genisoimage', ['genisoimage', 'mkisofs', 'xorrisofs'], searchPath);
  await rm(image, { force: true });
  // -f: a Secret volume's files are symlinks (into ..data); the medium must hold their contents.
  await run(mkisofs, ['-quiet', '-f', '-J', '-r', '-V', 'SYSPREP', '-o', image, ...present]);
}
