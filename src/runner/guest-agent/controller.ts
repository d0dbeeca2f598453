// Follows qemu-guest-agent in the guest: when it opens its port (VSERPORT_CHANGE), asks for the
// OS info and the IP addresses and keeps the addresses fresh; shuts the guest down through it.
import { z } from 'zod';
import type { Logger } from '../../util/logger.js';
import type { SnapshotStore } from '../snapshot/store.js';
import { GuestAgentClient } from './client.js';

/** How often the guest's addresses are read again while the agent runs (DHCP, hot-plugged NICs). */
const REFRESH_MS = 30_000;

const Interfaces = z.array(
  z.object({
    name: z.string(),
    'ip-addresses': z.array(z.object({ 'ip-address': z.string() })).optional(),
  }),
);

/** The addresses a user can reach the guest at: not loopback, not IPv6 link-local. */
export function guestAddresses(interfaces: unknown): string[] {
  const parsed = Interfaces.safeParse(interfaces);
  if (!parsed.success) return [];
  return parsed.data
    .filter((itf) => itf.name !== 'lo')
    .flatMap((itf) => (itf['ip-addresses'] ?? []).map((address) => address['ip-address']))
    .filter((address) => !address.startsWith('127.') && address !== '::1' && !/^fe80:/i.test(address));
}

export class GuestAgentController {
  private client?: GuestAgentClient;
  private refresh?: NodeJS.Timeout;

  constructor(
    private readonly socketPath: string,
    private readonly store: SnapshotStore,
    private readonly logger: Logger,
  ) {}

  get connected(): boolean {
    return this.store.snapshot.guestAgent?.connected === true;
  }

  /** The agent opened (or closed) its port in the guest. */
  async portChanged(open: boolean): Promise<void> {
    clearInterval(this.refresh);
    if (!open) {
      this.store.update((state) => ({ ...state, guestAgent: { connected: false } }), {
        event: 'GUEST_AGENT_DISCONNECTED',
      });
      return;
    }
    if (!this.client || this.client.closed) this.client = await GuestAgentClient.connect(this.socketPath);
    const osinfo = (await this.client.execute('guest-get-osinfo')) as Record<string, unknown>;
    this.store.update((state) => ({ ...state, guestAgent: { connected: true, osinfo } }), {
      event: 'GUEST_AGENT_CONNECTED',
    });
    this.logger.info({ os: osinfo['pretty-name'] ?? osinfo.id }, 'the guest agent answers');
    await this.readAddresses();
    this.refresh = setInterval(
      () => void this.readAddresses().catch((err: unknown) => this.logger.debug({ err }, 'guest addresses')),
      REFRESH_MS,
    );
  }

  private async readAddresses(): Promise<void> {
    const addresses = guestAddresses(await this.client!.execute('guest-network-get-interfaces'));
    const before = this.store.snapshot.guestAgent;
    if (!before?.connected || JSON.stringify(before.addresses ?? []) === JSON.stringify(addresses)) return;
    this.store.update((state) => ({ ...state, guestAgent: { ...before, addresses } }), {
      event: 'GUEST_AGENT_ADDRESSES',
    });
  }

  /** The agent to freeze the guest's file systems with, while one answers. */
  freezer(): GuestAgentClient | undefined {
    return this.connected && this.client && !this.client.closed ? this.client : undefined;
  }

  /** The guest's interfaces with their traffic counters; undefined while no agent answers. */
  async interfaces(timeoutMs: number): Promise<unknown> {
    if (!this.connected || !this.client || this.client.closed) return undefined;
    return this.client.execute('guest-network-get-interfaces', { timeoutMs });
  }

  /** Asks the guest to power down; false when the agent cannot be asked. */
  async shutdown(): Promise<boolean> {
    if (!this.connected || !this.client || this.client.closed) return false;
    try {
      // No reply on success: the guest goes down.
      await this.client.execute('guest-shutdown', { args: { mode: 'powerdown' }, noReply: true });
      return true;
    } catch (err) {
      this.logger.warn({ err }, 'guest-shutdown failed');
      return false;
    }
  }

  close(): void {
    clearInterval(this.refresh);
    this.client?.close();
  }
}
