import { describe, expect, it } from 'vitest';
import { isRunning, parseProcStat, processRef, signalProcess } from '../../../src/util/process.js';
import { cgroup2Mount } from '../../../src/devenv/process-group.js';

describe('processes named by pid and start time', () => {
  it('reads the state and start time after a command name with spaces and parentheses', () => {
    const stat = '4242 (qemu (x) 1) S 1 4242 4242 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 3 0 987654 1000 200';
    expect(parseProcStat(stat)).toEqual({ state: 'S', startTime: 987654 });
    expect(parseProcStat('garbage')).toBeUndefined();
  });

  it('tells this process from one of another start time with its pid, and signals only the former', () => {
    const self = processRef(process.pid)!;
    expect(isRunning(self)).toBe(true);
    const other = { pid: process.pid, startTime: self.startTime + 1 };
    expect(isRunning(other)).toBe(false);
    // Signal 0 checks only; a mismatch sends nothing at all.
    expect(signalProcess(other, 'SIGTERM')).toBe(false);
    expect(isRunning({ pid: 2 ** 22 + 1, startTime: 0 })).toBe(false);
  });
});

describe('the cgroup v2 hierarchy', () => {
  it('is found in a hybrid layout and on its own', () => {
    const hybrid = [
      '30 25 0:26 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids',
      '31 25 0:27 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw',
    ].join('\n');
    expect(cgroup2Mount(hybrid)).toBe('/sys/fs/cgroup/unified');
    expect(cgroup2Mount('29 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw')).toBe('/sys/fs/cgroup');
    expect(() => cgroup2Mount('30 25 0:26 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids')).toThrow(
      /no cgroup v2 hierarchy/,
    );
  });
});
