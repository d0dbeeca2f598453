import { describe, expect, it } from 'vitest';
import { namespaceSetup, type LaunchSpec } from '../../../src/node/runtime/launcher.js';

const spec: LaunchSpec = {
  argv: ['vmop', 'runner'],
  env: {},
  cwd: '/',
  logPath: '/p/runner.log',
  devStagingDir: '/p/dev',
  hostDevices: ['/dev/null', '/dev/kvm', '/dev/net/tun'],
  mounts: [
    { source: '/p/volumes/display', target: '/etc/opt/vmrunner/display-secret', readOnly: true },
    { source: '/p/volumes/config', target: '/etc/opt/vmrunner', readOnly: true },
    { source: '/v/data', target: '/var/local/vm-data' },
  ],
  devices: [{ source: '/v/disk.img', target: '/dev/system-disk' }],
};

/** The operations as lines, e.g. "bind /dev/null /p/dev/null". */
function lines(ops: string[]): string[] {
  const arity: Record<string, number> = { bind: 2, ro: 1, tmpfs: 2, devpts: 1, symlink: 2, move: 2, cd: 1 };
  const out: string[] = [];
  for (let i = 0; i < ops.length; i += arity[ops[i]!]! + 1)
    out.push(ops.slice(i, i + arity[ops[i]!]! + 1).join(' '));
  return out;
}

describe('mount namespace setup', () => {
  const ops = lines(namespaceSetup(spec, (device) => device !== '/dev/kvm'));

  it('assembles /dev in the staging dir from the host devices that exist and the disks, then moves it', () => {
    const moved = ops.indexOf('move /p/dev /dev');
    expect(ops[0]).toBe('tmpfs /p/dev mode=755,size=65536k');
    expect(ops.slice(0, moved)).toEqual(
      expect.arrayContaining([
        'bind /dev/null /p/dev/null',
        'bind /dev/net/tun /p/dev/net/tun',
        'bind /v/disk.img /p/dev/system-disk',
      ]),
    );
    expect(ops).not.toContain('bind /dev/kvm /p/dev/kvm');
  });

  it('mounts volumes parents first and makes them read-only only after all are mounted', () => {
    const index = (line: string) => ops.indexOf(line);
    expect(index('bind /p/volumes/config /etc/opt/vmrunner')).toBeLessThan(
      index('bind /p/volumes/display /etc/opt/vmrunner/display-secret'),
    );
    expect(index('ro /etc/opt/vmrunner')).toBeGreaterThan(
      index('bind /p/volumes/display /etc/opt/vmrunner/display-secret'),
    );
    expect(ops).not.toContain('ro /var/local/vm-data');
    expect(ops.at(-1)).toBe('cd /');
  });
});
