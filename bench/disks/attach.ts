// The attach part of `npm run bench:disks`: on `vmop dev`'s node, the time from a disk added to a
// running VM's spec (kubectl patch) to the guest's kernel having it, and from its removal to the
// guest's kernel letting it go. A loop in the guest prints a line as /sys/block/sda comes and goes;
// the time is when that line reaches the console log on this machine (the runner data volume).
// Each attach is of a new disk: its claim is made, bound and exported as a user's would be.
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { startDevEnvironment } from '../../src/devenv/dev-environment.js';
import { clusterVms, testGuestManifest } from '../../test/support/cluster-vms.js';
import { hostPathOfClaim } from '../support/claims.js';
import { followLog, type FollowedLog } from '../support/follow-log.js';

const run = promisify(execFile);
const NAMESPACE = 'default';
const VM = 'bench-attach';
const WAIT_MS = 120_000;

/** When a line ending in `marker` (the shell's prompt may lead it) arrived after `after`. */
async function arrivalOf(log: FollowedLog, marker: string, after: number): Promise<number> {
  const deadline = performance.now() + WAIT_MS;
  for (;;) {
    const seen = log.arrivals.find(({ at, line }) => at >= after && line.trimEnd().endsWith(marker));
    if (seen) return seen.at;
    if (performance.now() > deadline) {
      const last = log.arrivals.slice(-10).map(({ line }) => line);
      throw new Error(
        `no "${marker}" in the console within ${WAIT_MS} ms; its last lines:\n${last.join('\n')}`,
      );
    }
    await sleep(5);
  }
}

export interface AttachTimes {
  attachMs: number[];
  detachMs: number[];
}

export async function benchAttach(runs: number): Promise<AttachTimes> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-bench-attach-'));
  const env = await startDevEnvironment({ dir });
  const vms = clusterVms(env.state.kubeconfig, NAMESPACE);
  const times: AttachTimes = { attachMs: [], detachMs: [] };
  try {
    await vms.apply(testGuestManifest(VM, NAMESPACE));
    await vms.waitForVm(VM, (vm) => {
      if (vms.condition(vm, 'Booted')?.status !== 'True') throw new Error('not booted yet');
    });
    await vms.waitForConsole(VM, 'VMOP-GUEST-READY');
    const log = followLog(path.join(await hostPathOfClaim(vms, `${VM}-runner-data`), 'console.log'), 2);
    // The guest tells when its kernel has a SCSI disk and when it no longer has.
    await vms.typeOnConsole(
      VM,
      'while :; do if [ -e /sys/block/sda ]; then [ -z "$up" ] && echo DISK-UP && up=1; else [ -n "$up" ] && echo DISK-DOWN && up=; fi; usleep 5000; done &',
    );
    const patch = (operations: object[]) =>
      run('kubectl', [
        ...['--kubeconfig', env.state.kubeconfig, '-n', NAMESPACE, 'patch', 'vm', VM],
        ...['--type', 'json', '-p', JSON.stringify(operations)],
      ]);
    for (let i = 0; i < runs; i++) {
      const disk = {
        volumeClaimTemplate: {
          metadata: { name: `extra${i}` },
          spec: { resources: { requests: { storage: '16Mi' } } },
        },
      };
      const added = performance.now();
      await patch([{ op: 'add', path: '/spec/vm/disks/-', value: disk }]);
      times.attachMs.push((await arrivalOf(log, 'DISK-UP', added)) - added);
      const removed = performance.now();
      await patch([{ op: 'remove', path: '/spec/vm/disks/0' }]);
      times.detachMs.push((await arrivalOf(log, 'DISK-DOWN', removed)) - removed);
      process.stderr.write(
        `attach ${i + 1}/${runs}: ${times.attachMs.at(-1)!.toFixed(0)} ms, detach ${times.detachMs.at(-1)!.toFixed(0)} ms\n`,
      );
    }
    await log.stop();
  } finally {
    await env.stop();
    await rm(dir, { recursive: true, force: true });
  }
  return times;
}
