import { describe, expect, it } from 'vitest';
import { parseMemorySize, parseRunnerConfig } from '../../../src/api/runner-config.js';

const parse = (yaml: string) => parseRunnerConfig(yaml);

describe('runner config', () => {
  it('applies upstream defaults to a minimal config', () => {
    const result = parse('"/Runner":\n  vm:\n    name: test-vm\n');
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    const settings = result.config['/Runner'];
    expect(settings).toMatchObject({
      template: 'standard-vm.liquid',
      updateTemplate: false,
      guestShutdownStops: false,
    });
    expect(settings.vm).toMatchObject({
      name: 'test-vm',
      useTpm: false,
      firmware: 'uefi',
      bootMenu: false,
      powerdownTimeout: 900,
      cpuModel: 'host',
      maximumCpus: 1,
      currentCpus: 1,
      accelerator: 'kvm',
      maximumRam: 1024 ** 3,
      rtcBase: 'utc',
      rtcClock: 'rt',
      network: [{ type: 'tap', device: 'virtio-net' }],
      drives: [],
      display: { outputs: 1 },
    });
    expect(settings.vm.currentRam).toBeUndefined();
  });

  it('reads the config the controller writes (upstream field names)', () => {
    const result = parse(`
"/Runner":
  dataDir: /var/local/vm-data
  guestShutdownStops: true
  cloudInit:
    metaData: { instance-id: v1 }
    userData: {}
  vm:
    name: test-vm
    uuid: "12345678-1234-1234-1234-123456789abc"
    useTpm: true
    firmware: secure-4m
    powerdownTimeout: 60
    maximumCpus: 4
    currentCpus: 2
    sockets: 1
    coresPerDie: 4
    maximumRam: "8 GiB"
    currentRam: "4 GiB"
    network:
      - type: user
        device: virtio-net
    drives:
      - type: raw
        resource: /dev/system-disk
        bootindex: 0
      - type: ide-cd
        file: ""
    display:
      spice:
        port: 5910
`);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    const vm = result.config['/Runner'].vm;
    expect(vm).toMatchObject({
      maximumRam: 8 * 1024 ** 3,
      currentRam: 4 * 1024 ** 3,
      sockets: 1,
      coresPerDie: 4,
    });
    expect(vm.display.spice).toEqual({ port: 5910, usbRedirects: 2 });
    expect(vm.drives).toEqual([
      { type: 'raw', resource: '/dev/system-disk', bootindex: 0 },
      { type: 'ide-cd', file: '' },
    ]);
    expect(result.config['/Runner'].cloudInit).toEqual({ metaData: { 'instance-id': 'v1' }, userData: {} });
  });

  it('raises maximumCpus to currentCpus, as upstream does', () => {
    const result = parse('"/Runner":\n  vm:\n    name: a\n    maximumCpus: 2\n    currentCpus: 3\n');
    expect(result.ok && result.config['/Runner'].vm.maximumCpus).toBe(3);
  });

  it.each([
    [
      '"/Runner":\n  vm:\n    name: a\n    currentCpus: two\n',
      '"/Runner".vm.currentCpus: expected number, received string',
    ],
    ['"/Runner":\n  vm: {}\n', '"/Runner".vm.name: expected string, received undefined'],
    [
      '"/Runner":\n  vm:\n    name: a\n    maximumRam: lots\n',
      '"/Runner".vm.maximumRam: not a memory size: "lots"',
    ],
    [
      '"/Runner":\n  vm:\n    name: a\n    drives: [{ type: raw }]\n',
      '"/Runner".vm.drives[0]: a raw drive needs',
    ],
    ['"/Runner":\n  vm:\n    name: a\n    firmware: coreboot\n', '"/Runner".vm.firmware:'],
    [
      '"/Runner":\n  vm:\n    name: a\n    maximumRam: 1Gi\n    currentRam: 2Gi\n',
      '"/Runner".vm.currentRam: must not exceed maximumRam',
    ],
    ['vm:\n  name: a\n', '"/Runner": expected object, received undefined'],
    ['"/Runner": [unclosed\n', 'not valid YAML'],
  ])('names the field path of an error in %j', (yaml, message) => {
    const result = parse(yaml);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.errors.some((error) => error.startsWith(message))).toBe(true);
  });

  it.each([
    [268435456, 268435456],
    ['256Mi', 256 * 1024 ** 2],
    ['4 GiB', 4 * 1024 ** 3],
    ['1G', 1e9],
    ['1.5Gi', 1.5 * 1024 ** 3],
    ['512 kB', 512e3],
    ['12', 12],
  ])('parses the memory size %j', (input, bytes) => {
    expect(parseMemorySize(input)).toBe(bytes);
  });

  it.each(['', 'many', '1 parsec', '-1Gi', -5])('rejects the memory size %j', (input) => {
    expect(parseMemorySize(input)).toBeUndefined();
  });
});
