// The local cluster's OCI registry for disk images (go-containerregistry's, in memory, plain
// HTTP), holding the test guest as a containerDisk (KubeVirt's layout: the qcow2 under /disk/)
// and an image without a disk, pushed with crane as a user's CI would push theirs.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort, waitForPort } from '../util/free-port.js';
import { locateNodeBinaries } from './kube-binaries.js';
import { spawnLogged, type LoggedProcess } from './logged-process.js';
import type { ProcessGroup } from './process-group.js';

const run = promisify(execFile);

export interface ImageRegistry {
  /** host:port, reachable from the host and from pods. */
  address: string;
  /** The test guest's bootable disk as a containerDisk. */
  testGuestImage: string;
  /** An image whose layers hold no disk. */
  noDiskImage: string;
  process: LoggedProcess;
  stop(): Promise<void>;
}

export async function startImageRegistry(input: {
  dir: string;
  host: string;
  testGuestDisk: string;
  group?: ProcessGroup;
}): Promise<ImageRegistry> {
  const binaries = await locateNodeBinaries();
  const port = await freePort(input.host);
  const registry = await spawnLogged(
    'registry',
    binaries.registry,
    ['-listen', `${input.host}:${port}`],
    path.join(input.dir, 'registry.log'),
    { group: input.group },
  );
  const address = `${input.host}:${port}`;
  try {
    await waitForPort(port, input.host);
    const work = await mkdtemp(path.join(input.dir, 'registry-push-'));
    try {
      const push = async (name: string, files: Record<string, string>) => {
        const root = path.join(work, name);
        for (const [file, source] of Object.entries(files)) {
          await mkdir(path.dirname(path.join(root, file)), { recursive: true });
          await run('cp', [source, path.join(root, file)]);
        }
        const layer = path.join(work, `${name}.tar.gz`);
        await run('tar', ['-C', root, '-czf', layer, ...Object.keys(files)]);
        const image = `${address}/${name}:1`;
        await run(binaries.crane, ['append', '--insecure', '-f', layer, '-t', image]);
        return image;
      };
      const hello = path.join(work, 'hello.txt');
      await writeFile(hello, 'an image without a disk\n');
      return {
        address,
        testGuestImage: await push('test-guest', { 'disk/test-guest.qcow2': input.testGuestDisk }),
        noDiskImage: await push('no-disk', { 'etc/hello.txt': hello }),
        process: registry,
        stop: () => registry.stop(5_000),
      };
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  } catch (err) {
    await registry.stop(1_000);
    throw new Error(`the image registry did not start: ${String(err)}\n${await registry.logTail()}`);
  }
}
