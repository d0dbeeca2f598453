// The runner's DHCP answers (pure): a guest's DISCOVER gets an OFFER of its VM's own address as a
// /32 with the pod's tap as on-link gateway (RFC 3442), a REQUEST for it an ACK, one for another
// address a NAK, and messages for another server or of other types nothing.
import { describe, expect, it } from 'vitest';
import {
  DhcpMessage,
  classlessRoutes,
  dhcpReply,
  parseDhcpRequest,
  type Lease,
} from '../../../src/runner/network/dhcp.js';

const MAC = Buffer.from('020000000005', 'hex');
const lease: Lease = {
  address: '10.66.10.5',
  gateway: '169.254.1.1',
  dnsServers: ['10.96.0.10'],
  leaseSeconds: 86_400,
  hostName: 'vm1',
};

/** A client's message as udhcpc sends it. */
function clientMessage(type: number, options: Array<[number, number[]]> = [], xid = 0x12345678): Buffer {
  const header = Buffer.alloc(236);
  header[0] = 1;
  header[1] = 1;
  header[2] = 6;
  header.writeUInt32BE(xid, 4);
  MAC.copy(header, 28);
  const cookie = Buffer.from([0x63, 0x82, 0x53, 0x63]);
  const encoded = [[53, [type]] as [number, number[]], ...options].flatMap(([code, value]) => [
    code,
    value.length,
    ...value,
  ]);
  return Buffer.concat([header, cookie, Buffer.from([...encoded, 255])]);
}

/** A reply's options by code. */
function optionsOf(reply: Buffer): Map<number, Buffer> {
  const options = new Map<number, Buffer>();
  for (let at = 240; reply[at] !== 255; at += 2 + reply[at + 1]!)
    options.set(reply[at]!, reply.subarray(at + 2, at + 2 + reply[at + 1]!));
  return options;
}
const ip = (bytes: Buffer | undefined) => Array.from(bytes ?? []).join('.');

describe("the runner's DHCP", () => {
  it("offers the VM's address as a /32 with the tap as on-link gateway, DNS and host name", () => {
    const request = parseDhcpRequest(clientMessage(DhcpMessage.Discover))!;
    expect(request).toMatchObject({ message: DhcpMessage.Discover, xid: 0x12345678 });
    const reply = dhcpReply(request, lease)!;
    expect(reply[0]).toBe(2); // BOOTREPLY
    expect(reply.readUInt32BE(4)).toBe(0x12345678);
    expect(ip(reply.subarray(16, 20))).toBe('10.66.10.5'); // yiaddr
    expect(reply.subarray(28, 34).equals(MAC)).toBe(true);
    const options = optionsOf(reply);
    expect([...options.get(53)!]).toEqual([DhcpMessage.Offer]);
    expect(ip(options.get(54))).toBe('169.254.1.1');
    expect(ip(options.get(1))).toBe('255.255.255.255');
    expect(ip(options.get(3))).toBe('169.254.1.1');
    expect(ip(options.get(6))).toBe('10.96.0.10');
    expect(options.get(51)!.readUInt32BE()).toBe(86_400);
    expect(options.get(12)!.toString()).toBe('vm1');
    // 169.254.1.1/32 on-link, then 0.0.0.0/0 via 169.254.1.1.
    expect([...options.get(121)!]).toEqual([32, 169, 254, 1, 1, 0, 0, 0, 0, 0, 169, 254, 1, 1]);
    expect(classlessRoutes('169.254.1.1').equals(options.get(121)!)).toBe(true);
  });

  it('acknowledges a request for the address, refuses one for another, ignores another server', () => {
    const requesting = (address: number[], server = [169, 254, 1, 1]) =>
      parseDhcpRequest(
        clientMessage(DhcpMessage.Request, [
          [50, address],
          [54, server],
        ]),
      )!;
    expect([...optionsOf(dhcpReply(requesting([10, 66, 10, 5]), lease)!).get(53)!]).toEqual([
      DhcpMessage.Ack,
    ]);
    const nak = dhcpReply(requesting([10, 0, 2, 15]), lease)!;
    expect([...optionsOf(nak).get(53)!]).toEqual([DhcpMessage.Nak]);
    expect(ip(nak.subarray(16, 20))).toBe('0.0.0.0');
    expect(dhcpReply(requesting([10, 66, 10, 5], [10, 0, 2, 2]), lease)).toBeUndefined();
    expect(dhcpReply(parseDhcpRequest(clientMessage(DhcpMessage.Release))!, lease)).toBeUndefined();
  });

  it('takes nothing that is not a well-formed BOOTREQUEST with a message type', () => {
    expect(parseDhcpRequest(Buffer.alloc(100))).toBeUndefined();
    const reply = clientMessage(DhcpMessage.Discover);
    reply[0] = 2;
    expect(parseDhcpRequest(reply)).toBeUndefined();
    const truncated = clientMessage(DhcpMessage.Discover, [[50, [10, 66]]]).subarray(0, 246);
    expect(parseDhcpRequest(truncated)).toBeUndefined();
  });
});
