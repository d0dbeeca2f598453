// A running VM's disk copied as it was at the cut while its guest writes on (issue 54's copy for
// storage without CSI snapshots): real QEMU, the test guest and its real qemu-guest-agent.
import { open, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureTestGuest } from '../../../src/devenv/test-guest.js';
import { GuestAgentClient } from '../../../src/runner/guest-agent/client.js';
import { copyAtOneInstant } from '../../../src/runner/disk-copy/point-in-time.js';
import { QmpClient } from '../../../src/runner/qmp/client.js';
import { createLogger } from '../../../src/util/logger.js';
import { launchTestGuest, type TestQemu } from '../../support/qemu.js';
import { makeTempDir } from './harness.js';

const MiB = 1024 * 1024;
const DISK_BYTES = 16 * MiB;
/** Where the guest writes after the cut: the disk's last MiB, which the copy reaches last. */
const MARK_AT = 15 * MiB;
/** Slow enough that the guest writes while the copy is under way (16 MiB take 8 s). */
const COPY_RATE = 2 * MiB;
const logger = createLogger('test');

/** The marker at MARK_AT of the raw image `file`. */
async function markerIn(file: string): Promise<string> {
  const handle = await open(file, 'r');
  try {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(16), 0, 16, MARK_AT);
    return buffer.subarray(0, bytesRead).toString().replace(/\0+$/, '');
  } finally {
    await handle.close();
  }
}

/** A raw image of DISK_BYTES with `marker` at MARK_AT. */
async function rawImage(file: string, marker = '') {
  await writeFile(file, Buffer.alloc(DISK_BYTES));
  const handle = await open(file, 'r+');
  await handle.write(Buffer.from(marker), 0, marker.length, MARK_AT);
  await handle.close();
}

const rawFile = (filename: string) => ({ driver: 'raw', file: { driver: 'file', filename } });

describe('runner: a point-in-time copy of a running disk', () => {
  let dir: string;
  let qemu: TestQemu;
  let qmp: QmpClient;
  let agent: GuestAgentClient;
  const file = (name: string) => path.join(dir, name);
  /** The guest writes `marker` at MARK_AT of its disk, past its page cache. */
  const guestWrites = async (marker: string) =>
    expect(
      await qemu.console.run(
        `printf ${marker} | dd of=/dev/vda bs=1 seek=${MARK_AT} conv=notrunc,fsync 2>/dev/null`,
      ),
    ).toBe(0);

  beforeAll(async () => {
    dir = await makeTempDir('point-in-time');
    await rawImage(file('disk.raw'), 'BEFORE');
    qemu = await launchTestGuest(await ensureTestGuest(), {
      args: [
        ...['-blockdev', `driver=file,filename=${file('disk.raw')},node-name=disk0-file`],
        ...[
          '-blockdev',
          'driver=raw,file=disk0-file,node-name=disk0',
          '-device',
          'virtio-blk-pci,drive=disk0',
        ],
        ...['-chardev', `socket,id=qga,path=${file('qga.sock')},server=on,wait=off`],
        ...['-device', 'virtserialport,chardev=qga,name=org.qemu.guest_agent.0'],
      ],
    });
    qmp = await QmpClient.connect(qemu.qmpSocket);
    await qemu.console.waitForLine('VMOP-GUEST-READY', { timeoutMs: 120_000 });
    agent = await GuestAgentClient.connect(file('qga.sock'));
    // The agent answers once it runs in the guest.
    for (let attempt = 0; ; attempt++) {
      try {
        await agent.execute('guest-ping', { timeoutMs: 2_000 });
        break;
      } catch (err) {
        if (attempt > 30) throw err;
      }
    }
  }, 180_000);

  afterAll(async () => {
    agent?.close();
    await qmp?.close();
    await qemu?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('frozen through the guest agent: the copy holds the disk as it was at the cut, not what the guest wrote during the copy; the guest runs thawed', async () => {
    await rawImage(file('copy.raw'));
    // The real agent, its commands noted.
    const asked: string[] = [];
    const noting = {
      execute: (command: string, options?: { timeoutMs?: number }) => {
        asked.push(command);
        return agent.execute(command, options);
      },
    };
    const cut = await copyAtOneInstant(
      { qmp, agent: noting, logger },
      [{ node: 'disk0', target: rawFile(file('copy.raw')) }],
      COPY_RATE,
    );
    expect(cut.consistency).toBe('FileSystem');
    expect(cut.reason).toBeUndefined();
    expect(asked).toEqual(['guest-fsfreeze-freeze', 'guest-fsfreeze-thaw']); // thawed at the cut
    await guestWrites('AFTER!');
    const jobs = await qmp.execute<Array<{ offset: number; len: number }>>('query-block-jobs');
    expect(jobs[0]!.offset).toBeLessThan(jobs[0]!.len); // written while the copy was under way
    await cut.done;
    expect(await markerIn(file('copy.raw'))).toBe('BEFORE');
    expect(await markerIn(file('disk.raw'))).toBe('AFTER!');
    expect(await agent.execute('guest-fsfreeze-status')).toBe('thawed');
    expect(await qmp.execute('query-block-jobs')).toEqual([]);
    // The target is gone from QEMU: nothing is left of the copy but its file.
    const nodes = await qmp.execute<Array<{ 'node-name': string }>>('query-named-block-nodes');
    expect(nodes.map((node) => node['node-name']).filter((name) => name.includes('point-in-time'))).toEqual(
      [],
    );
  });

  it('without a guest agent the copy is crash-consistent and says why', async () => {
    await rawImage(file('copy2.raw'));
    const cut = await copyAtOneInstant({ qmp, logger }, [
      { node: 'disk0', target: rawFile(file('copy2.raw')) },
    ]);
    expect(cut).toMatchObject({ consistency: 'Crash', reason: 'no guest agent answers' });
    await cut.done;
    expect(await markerIn(file('copy2.raw'))).toBe('AFTER!');
  });

  it('a target that cannot be opened fails before any cut, and leaves the guest thawed', async () => {
    await expect(
      copyAtOneInstant({ qmp, agent, logger }, [
        { node: 'disk0', target: rawFile(file('missing/copy.raw')) },
      ]),
    ).rejects.toThrow(/missing\/copy\.raw/);
    expect(await agent.execute('guest-fsfreeze-status')).toBe('thawed');
    expect(await qmp.execute('query-block-jobs')).toEqual([]);
  });

  it('a cut QEMU refuses thaws the guest, removes the targets and leaves no wait behind', async () => {
    await rawImage(file('copy3.raw'));
    const listening = qmp.listenerCount('event');
    await expect(
      copyAtOneInstant({ qmp, agent, logger }, [
        { node: 'no-such-disk', target: rawFile(file('copy3.raw')) },
      ]),
    ).rejects.toThrow(/no-such-disk/);
    expect(qmp.listenerCount('event')).toBe(listening);
    expect(await agent.execute('guest-fsfreeze-status')).toBe('thawed');
    const nodes = (await qmp.execute('query-named-block-nodes')) as Array<{ 'node-name': string }>;
    expect(nodes.map((node) => node['node-name'])).not.toContain('point-in-time-target-0');
  });
});
