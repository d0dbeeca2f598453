// npm run docs:screenshots — the pictures of docs/gui.md: each page of the web GUI as a person sees
// it on `vmop dev` (its own, in a scratch directory; emulated VMs), written to docs/images/gui/.
// Run it after changing a page; the pictures are committed with the change. The OS icons need an
// emoji font (Debian: fonts-noto-color-emoji).
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startDevEnvironment } from '../src/devenv/dev-environment.js';
import { launchChromium, logIn } from '../test/support/browser.js';
import { clusterVms, testGuestManifest } from '../test/support/cluster-vms.js';

const OUT = path.join(import.meta.dirname, '..', 'docs', 'images', 'gui');
const NAMESPACE = 'default';
const VIEWPORT = { width: 1280, height: 800 };
const forAlice = '  permissions:\n  - user: alice\n    may: ["*"]\n';

async function main() {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-gui-screenshots-'));
  const env = await startDevEnvironment({ dir, kvm: false });
  const vms = clusterVms(env.state.kubeconfig, NAMESPACE);
  const browser = await launchChromium();
  try {
    await vms.apply(
      [
        testGuestManifest('web', NAMESPACE, { extraSpec: forAlice, spicePort: 5900, vncPort: 5901 }),
        testGuestManifest('build', NAMESPACE, { extraSpec: forAlice, currentCpus: 2 }),
        testGuestManifest('db', NAMESPACE, { extraSpec: forAlice }).replace(
          'state: Running',
          'state: Stopped',
        ),
        `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineImage
metadata: {name: test-guest, namespace: ${NAMESPACE}}
spec:
  source: {http: {url: "${env.state.imageServer.url}/test-guest.qcow2"}}
  storage: {size: 64Mi}
`,
      ].join('---\n'),
    );
    for (const name of ['web', 'build'])
      await vms.waitForVm(name, (vm) => {
        if (vms.condition(vm, 'Booted')?.status !== 'True') throw new Error(`${name} has not booted`);
      });
    await vms.typeOnConsole('web', 'echo "Hello from the web VM" > /dev/tty0');
    const url = env.state.web.urls[0]!;
    const shoot = async (who: string, page: string, file: string, ready: string) => {
      const { context, page: tab } = await logIn(browser, url, who, { viewport: VIEWPORT });
      await tab.goto(`${url}${page}`);
      await tab.locator(ready).first().waitFor({ timeout: 60_000 });
      await tab.waitForTimeout(2_000); // charts and displays draw after the data came
      await tab.screenshot({ path: path.join(OUT, file) });
      await context.close();
      console.log(`wrote docs/images/gui/${file}`);
    };
    await shoot('alice', '/', 'my-vms.png', '[data-vm]');
    await shoot('admin', '/admin', 'all-vms.png', '[data-vm]');
    await shoot('admin', '/nodes', 'nodes.png', '[data-node]');
    await shoot('admin', '/images', 'images.png', '[data-image]');
    await shoot('admin', '/new', 'new-vm.png', '[data-new-vm]');
    await shoot('admin', `/vm/${NAMESPACE}/web`, 'vm-page.png', '[data-vm-page]');
    await shoot('alice', `/console/${NAMESPACE}/web?view=vnc`, 'console-vnc.png', '[data-vnc] canvas');
    await shoot(
      'alice',
      `/console/${NAMESPACE}/web?view=serial`,
      'console-serial.png',
      '[data-terminal] .xterm-rows',
    );
  } finally {
    await browser.close();
    await env.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
