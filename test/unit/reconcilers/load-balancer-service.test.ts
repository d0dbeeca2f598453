import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { desiredLoadBalancerService } from '../../../src/reconcilers/virtual-machine/load-balancer/service.js';

const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));
const vm = (loadBalancerService?: unknown, spice: unknown = { port: 5910 }) =>
  VirtualMachine.parse({
    ...seed,
    metadata: { ...seed.metadata, uid: 'u1' },
    spec: {
      ...seed.spec,
      ...(loadBalancerService !== undefined && { loadBalancerService }),
      vm: { ...seed.spec.vm, display: spice ? { spice } : { outputs: 1 } },
    },
  });
const off = { enabled: false };
const on = { enabled: true, labels: { team: 'a' }, annotations: { pool: 'x' } };

describe('the LoadBalancer Service of a VM', () => {
  it("follows the manager's default unless the VM says otherwise; {} opts out", () => {
    expect(desiredLoadBalancerService(vm(), off)).toBeUndefined();
    expect(desiredLoadBalancerService(vm(), on)?.spec?.type).toBe('LoadBalancer');
    expect(desiredLoadBalancerService(vm({}), on)).toBeUndefined();
    expect(desiredLoadBalancerService(vm({ labels: { x: 'y' } }), off)).toBeDefined();
  });

  it('merges labels and annotations over the defaults; null removes a key; the selector labels stay', () => {
    const svc = desiredLoadBalancerService(
      vm({ labels: { team: null, 'app.kubernetes.io/instance': 'other' }, annotations: { extra: '1' } }),
      on,
    )!;
    expect(svc.metadata?.labels).not.toHaveProperty('team');
    expect(svc.metadata?.labels?.['app.kubernetes.io/instance']).toBe('test-vm');
    expect(svc.metadata?.annotations).toEqual({ pool: 'x', extra: '1' });
    expect(svc.spec?.ports).toEqual([{ name: 'spice', port: 5910, targetPort: 5910, protocol: 'TCP' }]);
  });

  it('needs a SPICE display', () => {
    expect(desiredLoadBalancerService(vm(undefined, null), on)).toBeUndefined();
  });
});
