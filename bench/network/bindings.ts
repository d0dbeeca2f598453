// npm run bench:network, part one, on this machine (no cluster): the two ways a guest's port can
// answer at its pod's address, with the same test guest (TCG, 1 vCPU) and the same echo server
// (busybox `nc -e cat`): QEMU's user network forwarding a port (what vmop's runner does), and passt
// (KubeVirt's binding: its own process, QEMU's `-netdev stream`), each measured from this machine's
// loopback against a node echo server on loopback (the baseline). What it cannot say: passt in a
// restricted pod (it sandboxes itself with unshare and mount, which RuntimeDefault seccomp refuses;
// see docs/virtual-machine.md), so here it runs as this user, unconfined.
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { ensureTestGuest } from '../../src/devenv/test-guest.js';
import { freePort } from '../../src/util/free-port.js';
import { launchTestGuest, type TestQemu } from '../../test/support/qemu.js';
import { ECHO_HEADER, echoRow, measureEcho, type EchoSeen } from '../support/echo-client.js';

const run = promisify(execFile);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const ECHO_PORT = 7;
const READY = 'VMOP-GUEST-READY';

const locally = (args: string[]) => run('node', args, { maxBuffer: 1 << 20 }).then((out) => out.stdout);

async function measureGuest(label: string, qemu: TestQemu, port: number, baseline: EchoSeen) {
  await qemu.console.waitForLine(READY, { timeoutMs: 180_000 });
  // The echo server starts after the network is up: wait until it answers.
  for (let tries = 0; ; tries++) {
    const answered = await measureEcho(locally, '127.0.0.1', port, 1).then(
      () => true,
      () => false,
    );
    if (answered) break;
    if (tries > 60) throw new Error(`${label}: the guest's echo server does not answer`);
    await sleep(1000);
  }
  console.log(echoRow(label, await measureEcho(locally, '127.0.0.1', port, RUNS), baseline));
}

async function main() {
  const guest = await ensureTestGuest();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-bench-bindings-'));
  const baselineServer = net.createServer((socket) => {
    socket.setNoDelay(true);
    socket.pipe(socket);
  });
  const baselinePort = await freePort();
  await new Promise<void>((resolve) => baselineServer.listen(baselinePort, '127.0.0.1', resolve));
  try {
    console.log(`the test guest (TCG, 1 vCPU, 256 MiB); ${RUNS} runs per target (the median throughput)\n`);
    console.log(ECHO_HEADER);
    const baseline = await measureEcho(locally, '127.0.0.1', baselinePort, RUNS);
    console.log(echoRow('loopback, node echo server (baseline)', baseline, baseline));

    const userPort = await freePort();
    const user = await launchTestGuest(guest, {
      args: [
        ...['-netdev', `user,id=n0,hostfwd=tcp:127.0.0.1:${userPort}-:${ECHO_PORT}`],
        ...['-device', 'virtio-net-pci,netdev=n0'],
      ],
    });
    try {
      await measureGuest("QEMU's user network (hostfwd)", user, userPort, baseline);
    } finally {
      await user.stop();
    }

    if (!existsSync('/usr/bin/passt')) {
      console.log('passt: not installed (apt-get install passt)');
      return;
    }
    const passtPort = await freePort();
    const socketPath = path.join(dir, 'passt.socket');
    // Started as root, passt runs as nobody: it makes its socket in a directory nobody may write.
    await chmod(dir, 0o1777);
    // Foreground, one guest; forwards the host's port to the guest's echo port.
    const passt = spawn('passt', ['-f', '-q', '-s', socketPath, '-t', `${passtPort}:${ECHO_PORT}`], {
      stdio: 'ignore',
    });
    try {
      for (let waited = 0; !existsSync(socketPath); waited += 100) {
        if (waited > 10_000) throw new Error('passt made no socket in 10 s');
        await sleep(100);
      }
      const viaPasst = await launchTestGuest(guest, {
        args: [
          ...['-netdev', `stream,id=n0,server=off,addr.type=unix,addr.path=${socketPath}`],
          ...['-device', 'virtio-net-pci,netdev=n0'],
        ],
      });
      try {
        await measureGuest('passt (-netdev stream)', viaPasst, passtPort, baseline);
      } finally {
        await viaPasst.stop();
      }
    } finally {
      passt.kill();
    }
  } finally {
    baselineServer.close();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
