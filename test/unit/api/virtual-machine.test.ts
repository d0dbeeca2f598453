import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { CHART_CRD_DIR, CRDS, CRD_DIR, renderCrdYaml } from '../../../src/api/crd.js';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';

const seedExample = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));

describe('VirtualMachine schema', () => {
  it("accepts VM-Operator's local-path example unchanged and applies the documented defaults", () => {
    const vm = VirtualMachine.parse(seedExample);
    expect(vm.spec.vm).toMatchObject({
      state: 'Running',
      maximumCpus: 4,
      currentCpus: 2,
      maximumRam: '8Gi',
      currentRam: '4Gi',
      firmware: 'uefi',
      powerdownTimeout: 900,
      useTpm: false,
      rtcBase: 'utc',
      rtcClock: 'rt',
    });
    expect(vm.spec.guestShutdownStops).toBe(false);
    expect(vm.spec.runnerTemplate.update).toBe(true);
    expect(vm.spec.vm.disks[0]?.volumeClaimTemplate?.metadata?.name).toBe('system');
    expect(vm.spec.vm.disks[1]?.cdrom?.image).toBe('');
    expect(vm.spec.vm.display.spice).toMatchObject({ port: 5910, usbRedirects: 2, generateSecret: true });
  });

  it('defaults the state to Stopped', () => {
    const vm = VirtualMachine.parse({ ...seedExample, spec: { vm: {} } });
    expect(vm.spec.vm.state).toBe('Stopped');
    expect(vm.spec.vm.disks).toEqual([]);
  });

  it('names the field of a type error', () => {
    const result = VirtualMachine.safeParse({ ...seedExample, spec: { vm: { currentCpus: 'two' } } });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(['spec', 'vm', 'currentCpus']);
  });
});

describe('generated CRD', () => {
  it.each(CRDS.flatMap((definition) => [CRD_DIR, CHART_CRD_DIR].map((dir) => ({ dir, definition }))))(
    'matches the checked-in $dir/$definition.file (run `npm run gen:crds` after changing the schema)',
    ({ dir, definition }) => {
      expect(readFileSync(`${dir}/${definition.file}`, 'utf8')).toBe(renderCrdYaml(definition));
    },
  );

  it('is structural where the seeds give a schema; free-form only for userData, networkConfig, change values and the guest osinfo', () => {
    const crd = parse(renderCrdYaml(CRDS[0]!));
    const text = JSON.stringify(crd);
    const freeForm = [...text.matchAll(/"(\w+)":\{[^{}]*"x-kubernetes-preserve-unknown-fields":true/g)].map(
      (m) => m[1],
    );
    expect(freeForm.sort()).toEqual(['currentValue', 'desiredValue', 'networkConfig', 'osinfo', 'userData']);
    expect(text).not.toContain('$schema');
    expect(text).not.toContain('propertyNames');
    const version = crd.spec.versions[0];
    expect(version.subresources).toEqual({ status: {} });
    expect(version.additionalPrinterColumns.map((c: { name: string }) => c.name)).toEqual([
      'State',
      'Phase',
      'CPUs',
      'Core fraction',
      'RAM',
      'Class',
      'Need restart',
      'Agent',
      'Migratable',
      'Run policy',
      'Node',
      'IPAddress',
      'Age',
    ]);
  });
});
