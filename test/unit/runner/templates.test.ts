import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { RunnerConfigInput, RunnerSettings } from '../../../src/api/runner-config.js';
import { runnerPaths } from '../../../src/runner/paths.js';
import { templateContext } from '../../../src/runner/template/context.js';
import { shippedTemplateDir } from '../../../src/runner/template/locate.js';
import { flattenArguments } from '../../../src/runner/template/process-definitions.js';
import { renderProcessDefinitions, TemplateError } from '../../../src/runner/template/render.js';
import { runnerConfig } from './config-fixture.js';

type VmInput = RunnerConfigInput['/Runner']['vm'];

function settingsFor(
  vm: Partial<VmInput>,
  extra: Partial<RunnerConfigInput['/Runner']> = {},
): RunnerSettings {
  return runnerConfig({
    dataDir: '/var/lib/vm',
    runtimeDir: '/run/vm',
    ...extra,
    vm: { name: 'vm1', network: [], ...vm },
  })['/Runner'];
}

async function render(
  template: string,
  settings: RunnerSettings,
  options: { hasDisplayPassword?: boolean } = {},
) {
  const paths = runnerPaths(settings, { configPath: '/etc/opt/vmrunner/config.yaml', env: {}, cwd: '/' });
  const context = templateContext({
    settings,
    paths,
    uuid: '0e5c9c5a-0000-4000-8000-000000000001',
    firmware: settings.vm.firmware === 'bios' ? {} : { rom: '/fw/CODE.fd', vars: '/var/lib/vm/fw-vars.fd' },
    hasDisplayPassword: options.hasDisplayPassword ?? false,
    isRegularFile: (file) => file.endsWith('.img'),
  });
  const text = readFileSync(path.join(shippedTemplateDir()!, template), 'utf8');
  const definitions = await renderProcessDefinitions(text, context, template);
  return {
    qemu: flattenArguments(definitions.qemu.arguments),
    swtpm: definitions.swtpm ? flattenArguments(definitions.swtpm.arguments) : undefined,
  };
}

/** The value following `option` each time it occurs. */
const valuesOf = (argv: string[], option: string) =>
  argv.flatMap((arg, index) => (arg === option ? [argv[index + 1]!] : []));

describe.each(['standard-vm.liquid', 'test-guest.liquid'])('template %s', (template) => {
  it('leaves the serial log to the runner: QEMU logs a character twice when its reader is late', async () => {
    const chardevs = valuesOf((await render(template, settingsFor({}))).qemu, '-chardev');
    const serial = chardevs.find((chardev) => chardev.startsWith('socket,id=console,'));
    expect(serial).toBeDefined();
    expect(serial).not.toContain('logfile=');
  });

  it('names its accelerator: KVM for the standard VM type, TCG only where the template says so', async () => {
    const { qemu } = await render(template, settingsFor({}));
    expect(valuesOf(qemu, '-accel')).toEqual([template === 'test-guest.liquid' ? 'tcg' : 'kvm']);
  });

  it('keeps a hostile VM name in one argument and cannot be made to add arguments', async () => {
    const hostile = 'x"; rm -rf / ,drive=evil\n- "-S"\n\'{{ q }}\' \\" \u2028 --evil';
    const benign = await render(template, settingsFor({ name: 'vm1' }));
    const attacked = await render(template, settingsFor({ name: hostile }));
    expect(attacked.qemu).toHaveLength(benign.qemu.length);
    const expected = `guest=${hostile.replace(/,/g, ',,')},debug-threads=on`;
    expect(valuesOf(attacked.qemu, '-name')).toEqual([expected]);
    expect(attacked.qemu.filter((arg) => arg === '-S')).toHaveLength(1);
  });

  it('renders CPU hotplug from one CPU, the RAM size and a balloon', async () => {
    const { qemu } = await render(
      template,
      settingsFor({ maximumCpus: 4, currentCpus: 2, maximumRam: '512Mi' }),
    );
    expect(valuesOf(qemu, '-smp')).toEqual(['1,maxcpus=4']);
    expect(valuesOf(qemu, '-m')).toEqual(['512']);
    expect(valuesOf(qemu, '-device')).toContain('virtio-balloon-pci,id=balloon0');
    expect(qemu).toContain('-S');
  });

  it('adds swtpm and a TPM device only with useTpm', async () => {
    const without = await render(template, settingsFor({}));
    expect(without.swtpm).toBeUndefined();
    expect(without.qemu.join(' ')).not.toContain('tpm');

    const { qemu, swtpm } = await render(template, settingsFor({ useTpm: true }));
    expect(swtpm).toEqual([
      'socket',
      '--tpm2',
      '--tpmstate',
      'dir=/var/lib/vm/swtpm',
      '--ctrl',
      'type=unixio,path=/run/vm/swtpm-sock,mode=0600',
      '--terminate',
    ]);
    expect(valuesOf(qemu, '-tpmdev')).toEqual(['emulator,id=tpm0,chardev=chrtpm']);
    expect(valuesOf(qemu, '-device')).toContain('tpm-tis,tpmdev=tpm0');
  });

  it('attaches CD drives by id, resolving image names in the image repository', async () => {
    const settings = settingsFor(
      {
        drives: [
          { type: 'ide-cd', file: 'fedora.iso', bootindex: 1 },
          { type: 'ide-cd', file: '' },
          { type: 'ide-cd', file: 'https://example.org/a,b.iso' },
        ],
      },
      { imageRepository: '/images' },
    );
    const drives = valuesOf((await render(template, settings)).qemu, '-drive');
    expect(drives.filter((drive) => drive.startsWith('id=drive-cd'))).toEqual([
      expect.stringMatching(/^id=drive-cd0,.*file=\/images\/fedora\.iso$/),
      expect.not.stringContaining('file='),
      expect.stringMatching(/file=https:\/\/example\.org\/a,,b\.iso$/),
    ]);
  });

  it('attaches the cloud-init image when configured', async () => {
    const { qemu } = await render(template, settingsFor({}, { cloudInit: { userData: {} } }));
    expect(valuesOf(qemu, '-drive')).toContain(
      'id=cidata,if=none,format=raw,readonly=on,file=/run/vm/cloud-init.img',
    );
  });

  it('uses a regular file resource as file and anything else as block device', async () => {
    const { qemu } = await render(
      template,
      settingsFor({
        drives: [
          { type: 'raw', resource: '/disks/system.img' },
          { type: 'raw', resource: '/dev/data-disk', bootindex: 2 },
        ],
      }),
    );
    const blockdevs = valuesOf(qemu, '-blockdev');
    expect(blockdevs).toContain('node-name=disk0-host,driver=file,filename=/disks/system.img');
    expect(
      blockdevs.some((arg) =>
        arg.startsWith('node-name=disk1-host,driver=host_device,filename=/dev/data-disk'),
      ),
    ).toBe(true);
    expect(valuesOf(qemu, '-device')).toContain('virtio-blk-pci,id=disk1-device,drive=disk1,bootindex=2');
  });

  it('asks for SPICE tickets only when a display password exists', async () => {
    const settings = settingsFor({ display: { spice: { port: 5910 } } });
    const open = valuesOf((await render(template, settings)).qemu, '-spice');
    expect(open).toEqual([expect.stringContaining('disable-ticketing=on')]);
    const locked = valuesOf((await render(template, settings, { hasDisplayPassword: true })).qemu, '-spice');
    expect(locked).toEqual([expect.not.stringContaining('disable-ticketing')]);
    expect(locked[0]).toMatch(/^port=5910/);
  });

  it('gives a VNC display on the loopback at its port, always asking for a password, and a screen for it', async () => {
    const { qemu } = await render(template, settingsFor({ display: { vnc: { port: 5905 } } }));
    expect(valuesOf(qemu, '-vnc')).toEqual(['127.0.0.1:5,password=on']);
    expect(valuesOf(qemu, '-device')).toContainEqual(expect.stringMatching(/^(VGA|virtio-vga),id=video0/));
    expect(valuesOf(qemu, '-spice')).toEqual([]);
  });
});

describe('standard VM template', () => {
  it('gives VNC on the loopback with a password beside SPICE, and none when not asked for', async () => {
    const both = settingsFor({ display: { spice: { port: 5900 }, vnc: { port: 5901 } } });
    expect(valuesOf((await render('standard-vm.liquid', both)).qemu, '-vnc')).toEqual([
      '127.0.0.1:1,password=on',
    ]);
    const spiceOnly = settingsFor({ display: { spice: { port: 5900 } } });
    expect(valuesOf((await render('standard-vm.liquid', spiceOnly)).qemu, '-vnc')).toEqual([]);
  });

  it('boots UEFI from pflash with the VM’s own variable store', async () => {
    const { qemu } = await render('standard-vm.liquid', settingsFor({ firmware: 'uefi' }));
    expect(valuesOf(qemu, '-machine')[0]).toContain('pflash0=fw-rom-device,pflash1=fw-eeprom-device');
    expect(valuesOf(qemu, '-blockdev')).toEqual(
      expect.arrayContaining([
        expect.stringContaining('filename=/fw/CODE.fd'),
        expect.stringContaining('filename=/var/lib/vm/fw-vars.fd'),
      ]),
    );
    // O_DIRECT on the firmware files made booting very slow (VM-Operator removed it too).
    const firmware = valuesOf(qemu, '-blockdev').filter((b) => b.startsWith('node-name=fw-'));
    expect(firmware.filter((b) => b.includes('cache.direct=on'))).toEqual([]);
  });

  it('uses qemu’s built-in BIOS without pflash', async () => {
    const { qemu } = await render('standard-vm.liquid', settingsFor({ firmware: 'bios' }));
    expect(qemu.join(' ')).not.toContain('pflash');
  });

  it("renders a routed network as the pod's tap, opened by name", async () => {
    for (const template of ['standard-vm.liquid', 'test-guest.liquid']) {
      const { qemu } = await render(
        template,
        settingsFor({ network: [{ type: 'routed', address: '10.66.10.5', mac: '02:00:00:00:00:05' }] }),
      );
      expect(valuesOf(qemu, '-netdev')).toEqual(['tap,id=hostnet0,ifname=vmop0,script=no,downscript=no']);
      expect(valuesOf(qemu, '-device').join(' ')).toContain(
        'virtio-net,netdev=hostnet0,mac=02:00:00:00:00:05',
      );
    }
  });

  it('renders networks as bridge or user netdevs', async () => {
    const { qemu } = await render(
      'standard-vm.liquid',
      settingsFor({ network: [{ type: 'tap', bridge: 'br1', mac: '52:54:00:00:00:01' }, { type: 'user' }] }),
    );
    expect(valuesOf(qemu, '-netdev')).toEqual(['bridge,id=hostnet0,br=br1', 'user,id=hostnet1']);
    expect(valuesOf(qemu, '-device')).toEqual(
      expect.arrayContaining([
        'virtio-net,netdev=hostnet0,mac=52:54:00:00:00:01',
        'virtio-net,netdev=hostnet1',
      ]),
    );
  });

  it("forwards a user network's guest ports from the same ports of the pod", async () => {
    for (const template of ['standard-vm.liquid', 'test-guest.liquid']) {
      const ports = [{ port: 22 }, { port: 5353, protocol: 'UDP' as const }];
      const { qemu } = await render(template, settingsFor({ network: [{ type: 'user', ports }] }));
      expect(valuesOf(qemu, '-netdev')).toEqual([
        'user,id=hostnet0,hostfwd=tcp::22-:22,hostfwd=udp::5353-:5353',
      ]);
    }
  });
});

describe('template rendering', () => {
  it('reports a template that does not render process definitions', async () => {
    const settings = settingsFor({});
    const paths = runnerPaths(settings, { configPath: '/etc/config.yaml', env: {}, cwd: '/' });
    const context = templateContext({
      settings,
      paths,
      uuid: 'u',
      firmware: {},
      hasDisplayPassword: false,
      isRegularFile: () => false,
    });
    const rendering = renderProcessDefinitions('swtpm:\n  arguments: []\n', context, 'broken');
    await expect(rendering).rejects.toBeInstanceOf(TemplateError);
    await expect(rendering).rejects.toThrow(
      /^template broken rendered invalid process definitions: .*qemu: /,
    );
    await expect(rendering).rejects.toThrow(/swtpm\.executable: Invalid input/);
  });
});

describe('template test-guest.liquid boots', () => {
  const kernelOf = async (drives: VmInput['drives']) =>
    valuesOf((await render('test-guest.liquid', settingsFor({ drives }))).qemu, '-kernel');

  it('its kernel from the image repository, unless a disk has a bootindex: then that disk', async () => {
    expect(await kernelOf([{ type: 'raw', resource: '/dev/data-disk' }])).toEqual([
      '/var/local/vmop-image-repository/test-guest/vmlinuz',
    ]);
    expect(await kernelOf([{ type: 'raw', resource: '/dev/system-disk', bootindex: 0 }])).toEqual([]);
  });
});
