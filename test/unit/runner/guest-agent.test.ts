import { describe, expect, it } from 'vitest';
import { guestAddresses } from '../../../src/runner/guest-agent/controller.js';

describe("the guest's addresses from guest-network-get-interfaces", () => {
  it('leave out loopback and IPv6 link-local ones', () => {
    const interfaces = [
      { name: 'lo', 'ip-addresses': [{ 'ip-address-type': 'ipv4', 'ip-address': '127.0.0.1', prefix: 8 }] },
      {
        name: 'eth0',
        'hardware-address': '52:54:00:12:34:56',
        'ip-addresses': [
          { 'ip-address-type': 'ipv4', 'ip-address': '10.0.2.15', prefix: 24 },
          { 'ip-address-type': 'ipv6', 'ip-address': 'fe80::5054:ff:fe12:3456', prefix: 64 },
          { 'ip-address-type': 'ipv6', 'ip-address': 'fd00::5', prefix: 64 },
        ],
      },
      { name: 'eth1' },
    ];
    expect(guestAddresses(interfaces)).toEqual(['10.0.2.15', 'fd00::5']);
    expect(guestAddresses('garbage')).toEqual([]);
  });
});
