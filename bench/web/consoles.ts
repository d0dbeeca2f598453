// npm run bench:web (second part) — the consoles in the page, on `vmop dev` with the test guest
// (TCG): keystroke-to-echo latency of the serial console in the browser (a key pressed in xterm.js
// until the shell's echo is drawn, timed in the page), and the SPICE display's throughput through
// the GUI (browser → GUI WebSocket → apiserver port-forward → kubelet → qemu) beside the same
// client over a direct TCP connection to qemu's port (browser → local WebSocket → TCP → qemu: the
// limit), while the guest fills its screen with random text. BENCH_KEYS (default 200) keystrokes;
// BENCH_SPICE_SECONDS (default 10) per SPICE sample, BENCH_RUNS (default 3) samples per path.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { WebSocketServer } from 'ws';
import { startDevEnvironment } from '../../src/devenv/dev-environment.js';
import { freePort } from '../../src/util/free-port.js';
import { createLogger } from '../../src/util/logger.js';
import { launchChromium, logIn } from '../../test/support/browser.js';
import { clusterVms, testGuestManifest } from '../../test/support/cluster-vms.js';
import { quantile } from '../support/quantile.js';

const KEYS = Number(process.env.BENCH_KEYS ?? 200);
const SPICE_SECONDS = Number(process.env.BENCH_SPICE_SECONDS ?? 10);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const NAMESPACE = 'default';
const VM = 'bench-console';
const SPICE_PORT = 5943;
const logger = createLogger('bench');
logger.level = 'warn';

/** What the in-page probes use of the DOM (this project's types have no DOM). */
interface InPage {
  document: {
    addEventListener(type: string, listener: () => void, options: object): void;
    querySelector(selector: string): { innerText: string } | null;
  };
  MutationObserver: new (callback: () => void) => {
    observe(target: unknown, options: object): void;
    disconnect(): void;
  };
  performance: { now(): number };
  probe?: { pressed?: number; drawn?: number };
}

/** Milliseconds from a key's keydown in the page until the terminal's text changed (the echo drawn). */
async function keystrokeToEcho(page: Page, key: string): Promise<number> {
  await page.evaluate(() => {
    const g = globalThis as unknown as InPage;
    const rows = g.document.querySelector('[data-terminal] .xterm-rows')!;
    const before = rows.innerText;
    const probe: InPage['probe'] = {};
    g.probe = probe;
    g.document.addEventListener('keydown', () => (probe.pressed ??= g.performance.now()), {
      capture: true,
      once: true,
    });
    const observer = new g.MutationObserver(() => {
      if (rows.innerText === before) return;
      probe.drawn = g.performance.now();
      observer.disconnect();
    });
    observer.observe(rows, { subtree: true, childList: true, characterData: true });
  });
  await page.keyboard.press(key);
  const handle = await page.waitForFunction(
    () => {
      const { probe } = globalThis as unknown as InPage;
      return probe?.drawn !== undefined && probe.pressed !== undefined && probe.drawn - probe.pressed;
    },
    undefined,
    { polling: 'raf', timeout: 10_000 },
  );
  return (await handle.jsonValue()) as number;
}

/** Bytes per second the page's SPICE WebSockets receive over SPICE_SECONDS, after 2 s to settle. */
async function spiceThroughput(page: Page, open: () => Promise<void>): Promise<number> {
  let bytes = 0;
  let counting = false;
  page.on('websocket', (socket) =>
    socket.on('framereceived', (frame) => {
      if (counting)
        bytes += typeof frame.payload === 'string' ? frame.payload.length : frame.payload.byteLength;
    }),
  );
  await open();
  await page.locator('#spice-screen canvas').first().waitFor({ timeout: 60_000 });
  await page.waitForTimeout(2_000);
  counting = true;
  await page.waitForTimeout(SPICE_SECONDS * 1000);
  counting = false;
  return bytes / SPICE_SECONDS;
}

async function main() {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-bench-consoles-'));
  const environment = await startDevEnvironment({ dir, logger });
  const { network } = environment.cluster.node;
  const url = environment.state.web.urls[0]!;
  const vms = clusterVms(environment.state.kubeconfig, NAMESPACE);
  const browser = await launchChromium();
  const cleanup: Array<() => unknown> = [];
  try {
    await vms.apply(testGuestManifest(VM, NAMESPACE, { spicePort: SPICE_PORT }));
    await vms.waitForVm(
      VM,
      (vm) => {
        if (vm.status?.conditions?.find((c) => c.type === 'Booted')?.status !== 'True')
          throw new Error('not booted yet');
      },
      600_000,
    );
    const admin = await logIn(browser, url, 'admin', { bypassCSP: true });

    // Serial console: one key at a time, the line cleared now and then.
    const serial = await admin.context.newPage();
    await serial.goto(`${url}/console/${NAMESPACE}/${VM}?view=serial`);
    await serial.locator('[data-terminal] .xterm-helper-textarea').waitFor();
    await serial.waitForFunction(
      () => !(globalThis as unknown as InPage).document.querySelector('[data-serial-state]'),
    );
    await serial.locator('[data-terminal] .xterm-helper-textarea').focus();
    await serial.keyboard.press('Enter');
    await serial.waitForTimeout(1_000);
    const echo: number[] = [];
    for (let key = 0; key < KEYS; key++) {
      if (key % 40 === 39) {
        await serial.keyboard.press('Control+U');
        await serial.waitForTimeout(200);
      }
      echo.push(await keystrokeToEcho(serial, 'x'));
    }
    await serial.keyboard.press('Control+U');
    // Then the guest fills its screen (VGA text, drawn by qemu, sent by SPICE) with random text.
    await serial.keyboard.type('while :; do head -c 3000 /dev/urandom | base64 > /dev/tty0; done &');
    await serial.keyboard.press('Enter');
    await serial.close();

    // The direct path: a TCP relay in the node's network namespace (qemu's SPICE listens on its
    // loopback) and a local WebSocket end for spice-html5, which speaks SPICE over WebSockets.
    const relayPort = await freePort();
    const relay = spawn(
      'nsenter',
      [
        `--net=${network.netnsPath}`,
        '--',
        process.execPath,
        '-e',
        `require('net').createServer((c) => { const q = require('net').connect(${SPICE_PORT}, '127.0.0.1');
           c.pipe(q).pipe(c); c.on('error', () => q.destroy()); q.on('error', () => c.destroy()); })
           .listen(${relayPort}, '${network.nodeAddress}');`,
      ],
      { stdio: 'inherit' },
    );
    cleanup.push(() => relay.kill());
    const directPort = await freePort();
    const direct = new WebSocketServer({
      port: directPort,
      host: '127.0.0.1',
      handleProtocols: () => 'binary',
    });
    cleanup.push(() => direct.close());
    direct.on('connection', (browserSocket) => {
      const qemu = net.connect(relayPort, network.nodeAddress);
      browserSocket.on('message', (data: Buffer) => qemu.write(data));
      qemu.on('data', (data) => browserSocket.send(data));
      browserSocket.on('close', () => qemu.destroy());
      qemu.on('close', () => browserSocket.close());
      qemu.on('error', () => browserSocket.close());
    });

    const through: Record<'gui' | 'direct', number[]> = { gui: [], direct: [] };
    for (let run = 0; run < RUNS; run++) {
      const viaGui = await admin.context.newPage();
      through.gui.push(
        await spiceThroughput(viaGui, () =>
          viaGui.goto(`${url}/console/${NAMESPACE}/${VM}`).then(() => undefined),
        ),
      );
      await viaGui.close();
      const viaTcp = await admin.context.newPage();
      through.direct.push(
        await spiceThroughput(viaTcp, async () => {
          await viaTcp.goto(`${url}/admin`);
          // The GUI sets the one-time password; the page then connects past the GUI.
          await viaTcp.evaluate(
            async ({ vm, port }) => {
              const g = globalThis as unknown as {
                document: { createElement(tag: string): { id: string }; body: { append(e: unknown): void } };
              };
              const me = (await (await fetch('/api/me')).json()) as { csrf: string };
              const answer = await fetch(`/api/vms/default/${vm}/console/spice`, {
                method: 'POST',
                headers: { 'X-CSRF-Token': me.csrf },
              });
              const { password } = (await answer.json()) as { password?: string };
              const screen = g.document.createElement('div');
              screen.id = 'spice-screen';
              g.document.body.append(screen);
              const { SpiceMainConn } = await import('/vendor/spice/main.js' as string);
              new SpiceMainConn({
                uri: `ws://127.0.0.1:${port}`,
                password: password ?? '',
                screen_id: 'spice-screen',
              });
            },
            { vm: VM, port: directPort },
          );
        }),
      );
      await viaTcp.close();
    }
    await admin.context.close();

    const mb = (bytesPerSecond: number) => (bytesPerSecond / 1e6).toFixed(2).padStart(6);
    const median = (values: number[]) => quantile(values, 0.5);
    console.log(`\nserial console in the browser: keystroke to echo drawn (${echo.length} keys, ms)`);
    console.log(
      `  p50 ${quantile(echo, 0.5).toFixed(1)}  p99 ${quantile(echo, 0.99).toFixed(1)}  max ${Math.max(...echo).toFixed(1)}`,
    );
    console.log(
      `\nSPICE display while the guest fills its screen (${RUNS} × ${SPICE_SECONDS} s; MB/s: min / median / max)`,
    );
    for (const [name, values] of [
      ['direct TCP to qemu (limit)', through.direct],
      ['through the GUI', through.gui],
    ] as const)
      console.log(
        `  ${name.padEnd(27)} ${mb(Math.min(...values))} ${mb(median(values))} ${mb(Math.max(...values))}`,
      );
    console.log(
      `  ratio GUI / direct (medians): ${(median(through.gui) / median(through.direct)).toFixed(2)}`,
    );
  } finally {
    for (const step of cleanup) await step();
    await browser.close();
    await environment.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
