import { describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import { resolveCdImage } from '../../../src/runner/drives.js';
import { DEFAULT_IMAGE_REPOSITORY } from '../../../src/api/runner-config.js';
import { runnerPaths, vmDirectoryName } from '../../../src/runner/paths.js';
import { runnerConfig } from './config-fixture.js';

const settings = (extra: Partial<RunnerConfigInput['/Runner']> = {}, name = 'vm1') =>
  runnerConfig({ ...extra, vm: { name } })['/Runner'];

describe('runner paths', () => {
  const context = { configPath: '/etc/opt/vmrunner/config.yaml', cwd: '/work' };

  it('defaults to the XDG directories, per VM', () => {
    const paths = runnerPaths(settings(), {
      ...context,
      env: { XDG_RUNTIME_DIR: '/run/user/1000', XDG_DATA_HOME: '/home/u/.data' },
    });
    expect(paths).toMatchObject({
      runtimeDir: '/run/user/1000/vmrunner/vm1',
      dataDir: '/home/u/.data/vmrunner/vm1',
      monitorSocket: '/run/user/1000/vmrunner/vm1/monitor.sock',
      swtpmStateDir: '/home/u/.data/vmrunner/vm1/swtpm',
      imageRepository: DEFAULT_IMAGE_REPOSITORY,
      displaySecretDir: '/etc/opt/vmrunner',
    });
  });

  it('falls back to /tmp/$USER and ~/.local/share', () => {
    const paths = runnerPaths(settings(), { ...context, env: { USER: 'u', HOME: '/home/u' } });
    expect(paths.runtimeDir).toBe('/tmp/u/vmrunner/vm1');
    expect(paths.dataDir).toBe('/home/u/.local/share/vmrunner/vm1');
  });

  it('keeps a hostile VM name inside the default directories', () => {
    expect(vmDirectoryName('../../etc')).toBe('.._.._etc');
    expect(vmDirectoryName('..')).toBe('__');
    expect(runnerPaths(settings({}, '../x y'), { ...context, env: {} }).runtimeDir).toBe(
      '/tmp/vmrunner/.._x_y',
    );
  });

  it('lets VMOP_IMAGE_REPOSITORY override the configured image repository', () => {
    const configured = settings({ imageRepository: '/images' });
    expect(runnerPaths(configured, { ...context, env: {} }).imageRepository).toBe('/images');
    expect(
      runnerPaths(configured, { ...context, env: { VMOP_IMAGE_REPOSITORY: '/dev-images' } }).imageRepository,
    ).toBe('/dev-images');
  });
});

describe('CD images', () => {
  it.each([
    ['', undefined],
    ['  ', undefined],
    ['/isos/a.iso', '/isos/a.iso'],
    ['https://example.org/a.iso', 'https://example.org/a.iso'],
    ['fedora/live.iso', '/repo/fedora/live.iso'],
  ])('resolves %j', (image, file) => {
    expect(resolveCdImage(image, '/repo')).toBe(file);
  });
});
