import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { connectionFile, spiceEndpoint } from '../../../src/console/connection-file.js';

const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));
const vmWithSpice = (spice: Record<string, unknown> | undefined) =>
  VirtualMachine.parse({
    ...seed,
    spec: { ...seed.spec, vm: { ...seed.spec.vm, display: spice ? { spice } : { outputs: 1 } } },
  });
const pod = { status: { podIP: '192.0.2.7' } };

describe('SPICE connection files', () => {
  it("point at the runner's node, or at spice.server, with proxyUrl as proxy", () => {
    expect(spiceEndpoint(vmWithSpice({ port: 5910 }), pod)).toEqual({ host: '192.0.2.7', port: 5910 });
    expect(
      spiceEndpoint(
        vmWithSpice({ port: 5910, server: 'vm.example.org', proxyUrl: 'http://proxy:3128' }),
        pod,
      ),
    ).toEqual({ host: 'vm.example.org', port: 5910, proxy: 'http://proxy:3128' });
  });

  it('say why there is nothing to connect to', () => {
    expect(spiceEndpoint(vmWithSpice(undefined), pod)).toMatch(/has no SPICE display/);
    expect(spiceEndpoint(vmWithSpice({ port: 5910 }), undefined)).toMatch(/has no runner pod on a node yet/);
  });

  it("are virt-viewer's format, deleted by remote-viewer after use", () => {
    expect(connectionFile({ host: 'h', port: 5900, proxy: 'http://p:3128' }, 'ns/vm', 'pw')).toBe(
      '[virt-viewer]\ntype=spice\ntitle=ns/vm\nhost=h\nport=5900\npassword=pw\nproxy=http://p:3128\ndelete-this-file=1\n',
    );
    expect(connectionFile({ host: 'h', port: 5900 }, 'ns/vm')).not.toContain('password');
    expect(connectionFile({ host: '127.0.0.1', port: 40001 }, 'ns/vm', 'pw', 'vnc')).toBe(
      '[virt-viewer]\ntype=vnc\ntitle=ns/vm\nhost=127.0.0.1\nport=40001\npassword=pw\ndelete-this-file=1\n',
    );
  });
});
