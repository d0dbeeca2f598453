// DHCP (RFC 2131) for one guest NIC, pure: what the runner answers a guest's DISCOVER and REQUEST
// with. The guest gets its VM's own address as a /32 and a gateway that is the pod's tap
// (ROUTED_GATEWAY), reached on-link through a classless static route (RFC 3442, option 121), as
// KubeVirt's and Cilium's routed set-ups do: no subnet is shared with anyone, so nothing else
// needs to answer ARP.

const MAGIC_COOKIE = 0x63825363;
const HEADER_BYTES = 236;
const BOOTREQUEST = 1;
const BOOTREPLY = 2;

export const DhcpMessage = {
  Discover: 1,
  Offer: 2,
  Request: 3,
  Decline: 4,
  Ack: 5,
  Nak: 6,
  Release: 7,
  Inform: 8,
} as const;
export type DhcpMessage = (typeof DhcpMessage)[keyof typeof DhcpMessage];

const Option = {
  Pad: 0,
  SubnetMask: 1,
  Router: 3,
  DomainNameServer: 6,
  HostName: 12,
  InterfaceMtu: 26,
  RequestedAddress: 50,
  LeaseTime: 51,
  MessageType: 53,
  ServerIdentifier: 54,
  ClasslessStaticRoute: 121,
  End: 255,
} as const;

export interface DhcpRequest {
  message: DhcpMessage;
  xid: number;
  flags: number;
  /** The client's hardware address (6 bytes for Ethernet). */
  chaddr: Buffer;
  ciaddr: string;
  /** Option 50, where the client names the address it asks for. */
  requestedAddress?: string;
  /** Option 54: the server a REQUEST answers (another server's offer is none of ours). */
  serverIdentifier?: string;
}

export interface Lease {
  address: string;
  gateway: string;
  dnsServers: readonly string[];
  leaseSeconds: number;
  hostName?: string;
  mtu?: number;
}

const ipv4 = (bytes: Buffer) => Array.from(bytes.subarray(0, 4)).join('.');
const ipv4Bytes = (address: string) => Buffer.from(address.split('.').map(Number));

/** A client's message, or undefined for anything that is not a well-formed BOOTREQUEST with a message type. */
export function parseDhcpRequest(packet: Buffer): DhcpRequest | undefined {
  if (packet.length < HEADER_BYTES + 4 || packet[0] !== BOOTREQUEST) return undefined;
  if (packet.readUInt32BE(HEADER_BYTES) !== MAGIC_COOKIE) return undefined;
  const options = new Map<number, Buffer>();
  for (let at = HEADER_BYTES + 4; at < packet.length;) {
    const code = packet[at]!;
    if (code === Option.End) break;
    if (code === Option.Pad) {
      at += 1;
      continue;
    }
    const length = packet[at + 1];
    if (length === undefined || at + 2 + length > packet.length) return undefined;
    options.set(code, packet.subarray(at + 2, at + 2 + length));
    at += 2 + length;
  }
  const type = options.get(Option.MessageType);
  if (type?.length !== 1) return undefined;
  const requested = options.get(Option.RequestedAddress);
  const server = options.get(Option.ServerIdentifier);
  const hlen = Math.min(packet[2]!, 16);
  return {
    message: type[0] as DhcpMessage,
    xid: packet.readUInt32BE(4),
    flags: packet.readUInt16BE(10),
    ciaddr: ipv4(packet.subarray(12, 16)),
    chaddr: Buffer.from(packet.subarray(28, 28 + hlen)),
    ...(requested?.length === 4 && { requestedAddress: ipv4(requested) }),
    ...(server?.length === 4 && { serverIdentifier: ipv4(server) }),
  };
}

/** The classless static routes: the gateway on-link, then the default route through it. */
export function classlessRoutes(gateway: string): Buffer {
  return Buffer.concat([
    Buffer.from([32]),
    ipv4Bytes(gateway),
    ipv4Bytes('0.0.0.0'),
    Buffer.from([0]),
    ipv4Bytes(gateway),
  ]);
}

/** The reply to a request (OFFER, ACK or NAK), or undefined where none is due. */
export function dhcpReply(request: DhcpRequest, lease: Lease): Buffer | undefined {
  const type = replyType(request, lease);
  if (type === undefined) return undefined;
  const header = Buffer.alloc(HEADER_BYTES);
  header[0] = BOOTREPLY;
  header[1] = 1; // Ethernet
  header[2] = request.chaddr.length;
  header.writeUInt32BE(request.xid >>> 0, 4);
  header.writeUInt16BE(request.flags, 10);
  ipv4Bytes(request.ciaddr).copy(header, 12);
  if (type !== DhcpMessage.Nak) ipv4Bytes(lease.address).copy(header, 16);
  request.chaddr.copy(header, 28);
  const cookie = Buffer.alloc(4);
  cookie.writeUInt32BE(MAGIC_COOKIE);
  const option = (code: number, value: Buffer) => Buffer.concat([Buffer.from([code, value.length]), value]);
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return b;
  };
  const options = [
    option(Option.MessageType, Buffer.from([type])),
    option(Option.ServerIdentifier, ipv4Bytes(lease.gateway)),
  ];
  if (type !== DhcpMessage.Nak) {
    options.push(
      option(Option.LeaseTime, u32(lease.leaseSeconds)),
      option(Option.SubnetMask, ipv4Bytes('255.255.255.255')),
      option(Option.Router, ipv4Bytes(lease.gateway)),
      option(Option.ClasslessStaticRoute, classlessRoutes(lease.gateway)),
    );
    if (lease.dnsServers.length)
      options.push(option(Option.DomainNameServer, Buffer.concat(lease.dnsServers.map(ipv4Bytes))));
    if (lease.hostName) options.push(option(Option.HostName, Buffer.from(lease.hostName.slice(0, 63))));
    if (lease.mtu) {
      const mtu = Buffer.alloc(2);
      mtu.writeUInt16BE(lease.mtu);
      options.push(option(Option.InterfaceMtu, mtu));
    }
  }
  return Buffer.concat([header, cookie, ...options, Buffer.from([Option.End])]);
}

function replyType(request: DhcpRequest, lease: Lease): DhcpMessage | undefined {
  if (request.message === DhcpMessage.Discover) return DhcpMessage.Offer;
  if (request.message !== DhcpMessage.Request) return undefined; // RELEASE, DECLINE, INFORM: nothing to say
  if (request.serverIdentifier && request.serverIdentifier !== lease.gateway) return undefined;
  const asked = request.requestedAddress ?? request.ciaddr;
  return asked === lease.address ? DhcpMessage.Ack : DhcpMessage.Nak;
}
