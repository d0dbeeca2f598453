import { describe, expect, it } from 'vitest';
import type { RunnerConfig, RunnerConfigInput } from '../../../src/api/runner-config.js';
import { liveChanges, restartChanges } from '../../../src/runner/config-diff.js';
import { runnerConfig } from './config-fixture.js';

type VmInput = RunnerConfigInput['/Runner']['vm'];

const base: VmInput = {
  name: 'vm1',
  maximumCpus: 4,
  currentCpus: 2,
  maximumRam: '4Gi',
  currentRam: '2Gi',
  powerdownTimeout: 60,
  drives: [
    { type: 'raw', resource: '/dev/system-disk' },
    { type: 'ide-cd', file: 'a.iso' },
    { type: 'ide-cd', file: '' },
  ],
};

function config(
  vm: Partial<VmInput> = {},
  settings: Partial<RunnerConfigInput['/Runner']> = {},
): RunnerConfig {
  return runnerConfig({ ...settings, vm: { ...base, ...vm } });
}

describe('live changes', () => {
  const started = config();

  it('finds nothing when nothing changed', () => {
    expect(liveChanges(started, started, config())).toEqual({ cdMedia: [], diskSizes: [] });
  });

  it('finds CPU, RAM, powerdown timeout and CD medium changes', () => {
    const next = config({
      currentCpus: 3,
      currentRam: '1Gi',
      powerdownTimeout: 5,
      drives: [
        { type: 'raw', resource: '/dev/system-disk' },
        { type: 'ide-cd', file: '' },
        { type: 'ide-cd', file: 'b.iso' },
      ],
    });
    expect(liveChanges(started, started, next)).toEqual({
      currentCpus: 3,
      currentRam: 1024 ** 3,
      powerdownTimeout: 5,
      cdMedia: [
        { id: 'cd0', image: '' },
        { id: 'cd1', image: 'b.iso' },
      ],
      diskSizes: [],
    });
  });

  it('compares with what was applied last, not with the start', () => {
    const applied = config({ currentCpus: 3 });
    expect(liveChanges(started, applied, config({ currentCpus: 3 }))).toEqual({ cdMedia: [], diskSizes: [] });
    expect(liveChanges(started, applied, config({ currentCpus: 2 }))).toEqual({
      currentCpus: 2,
      cdMedia: [],
      diskSizes: [],
    });
  });

  it('limits CPUs and RAM to what the running qemu has', () => {
    const next = config({ maximumCpus: 8, currentCpus: 8, maximumRam: '16Gi', currentRam: '16Gi' });
    expect(liveChanges(started, started, next)).toMatchObject({ currentCpus: 4, currentRam: 4 * 1024 ** 3 });
  });

  it('takes a missing currentRam as maximumRam', () => {
    expect(liveChanges(started, started, config({ currentRam: undefined }))).toMatchObject({
      currentRam: 4 * 1024 ** 3,
    });
  });

  it('finds disks whose volume grew (the guest gets their new size), only of disks qemu has', () => {
    const sized = (size: string) =>
      config({ drives: [{ type: 'raw', resource: '/dev/system-disk', size }, ...base.drives!.slice(1)] });
    expect(liveChanges(started, started, sized('32Mi')).diskSizes).toEqual([
      { id: 'disk0', bytes: 32 * 1024 ** 2 },
    ]);
    expect(liveChanges(started, sized('32Mi'), sized('32Mi')).diskSizes).toEqual([]);
    const added = config({
      drives: [...base.drives!, { type: 'raw', resource: '/dev/new-disk', size: '1Gi' }],
    });
    expect(liveChanges(started, started, added).diskSizes).toEqual([]);
  });

  it('changes media only in CD drives qemu has', () => {
    const next = config({ drives: [...base.drives!, { type: 'ide-cd', file: 'c.iso' }] });
    expect(liveChanges(started, started, next).cdMedia).toEqual([]);
  });
});

describe('restart changes', () => {
  const started = config();

  it('ignores what is applied live', () => {
    const next = config(
      {
        currentCpus: 1,
        currentRam: '1Gi',
        powerdownTimeout: 1,
        drives: [
          { type: 'raw', resource: '/dev/system-disk', size: '64Gi' },
          { type: 'ide-cd', file: 'x.iso' },
          { type: 'ide-cd' },
        ],
      },
      { whenGuestPowersOff: 'waitForStop', whenQemuFails: 'waitForStop', resetRequest: 'reset-1' },
    );
    expect(restartChanges(started, next)).toEqual([]);
  });

  it('lists the field paths of everything else', () => {
    const next = config(
      { maximumRam: '8Gi', useTpm: true, display: { spice: { port: 5901 } }, drives: [base.drives![0]!] },
      { cloudInit: { userData: {} } },
    );
    expect(
      restartChanges(started, next)
        .map((change) => change.field)
        .sort(),
    ).toEqual(['cloudInit', 'vm.display.spice', 'vm.drives', 'vm.maximumRam', 'vm.useTpm']);
  });

  it('reports a maximumCpus raised by a larger currentCpus', () => {
    expect(restartChanges(started, config({ currentCpus: 6 }))).toEqual([
      { field: 'vm.maximumCpus', current: started['/Runner'].vm.maximumCpus, desired: 6 },
    ]);
  });

  it('gives the value qemu was started with and the one configured now', () => {
    expect(restartChanges(started, config({ maximumRam: '8Gi' }))).toEqual([
      { field: 'vm.maximumRam', current: started['/Runner'].vm.maximumRam, desired: 8 * 2 ** 30 },
    ]);
  });
});
