import { execFile } from 'node:child_process';
import { access } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/** The boot files of the test guest (Debian cloud kernel + busybox initramfs), see scripts/test-guest/. */
export interface TestGuest {
  dir: string;
  kernel: string;
  initrd: string;
}

/** The guest prints this line on ttyS0 once its modules are loaded and its watchers run. */
export const TEST_GUEST_READY_MARKER = 'VMOP-GUEST-READY';

/**
 * Kernel command line for the test guest; `extra` e.g. `vmop.powerbutton=ignore`. `no_timer_check`:
 * under TCG on a loaded host the kernel's boot-time check of the timer interrupt can miss its
 * ticks and panic ("IO-APIC + timer doesn't work!"); the check proves nothing about an emulated timer.
 */
export function testGuestKernelCmdline(extra: string[] = []): string {
  return [...TEST_GUEST_KERNEL_ARGS, ...extra].join(' ');
}

/** The test guest's own kernel arguments (also in templates/test-guest.liquid and its disk's SYSLINUX). */
export const TEST_GUEST_KERNEL_ARGS = ['console=ttyS0', 'quiet', 'no_timer_check'];

const buildScript = fileURLToPath(new URL('../../scripts/build-test-guest.sh', import.meta.url));
let building: Promise<TestGuest> | undefined;

/**
 * Returns the cached test guest, building it first when the cache lacks the current version
 * (the build script is a quick no-op otherwise). Concurrent callers share one build.
 */
export function ensureTestGuest(): Promise<TestGuest> {
  building ??= buildTestGuest().catch((error: unknown) => {
    building = undefined;
    throw error;
  });
  return building;
}

async function buildTestGuest(): Promise<TestGuest> {
  let stdout: string;
  try {
    ({ stdout } = await promisify(execFile)('bash', [buildScript], { maxBuffer: 1024 * 1024 }));
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim();
    throw new Error(`building the test guest failed (${buildScript}): ${stderr || String(error)}`);
  }
  const dir = stdout.trim().split('\n').at(-1) ?? '';
  const guest = { dir, kernel: path.join(dir, 'vmlinuz'), initrd: path.join(dir, 'initrd.img') };
  await Promise.all([access(guest.kernel), access(guest.initrd)]).catch(() => {
    throw new Error(`the test guest build printed ${JSON.stringify(dir)}, which lacks vmlinuz or initrd.img`);
  });
  return guest;
}
