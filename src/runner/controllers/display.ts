import path from 'node:path';
import type { Logger } from '../../util/logger.js';
import { expirePassword, setPassword, type QmpExecutor } from '../qmp/commands.js';

export const DISPLAY_PASSWORD_FILE = 'display-password';
export const PASSWORD_EXPIRY_FILE = 'password-expiry';

/** The files of the display secret (projected next to the config, as upstream does). */
export function displaySecretFiles(dir: string) {
  return { password: path.join(dir, DISPLAY_PASSWORD_FILE), expiry: path.join(dir, PASSWORD_EXPIRY_FILE) };
}

/** A display QEMU locks with a password: SPICE (when started with ticketing on) and VNC. */
export type DisplayProtocol = 'spice' | 'vnc';

/**
 * Sets the display password and its expiry on every locked display when they change. The password
 * is never logged.
 */
export class DisplayController {
  private password: string | undefined;
  private expiry: string | undefined;

  constructor(
    private readonly qmp: QmpExecutor,
    private readonly logger: Logger,
    private readonly protocols: readonly DisplayProtocol[],
  ) {}

  /** Returns whether the password was changed. expiry: "now", "never", "+SECONDS" or epoch seconds. */
  async apply(password: string | undefined, expiry: string | undefined): Promise<boolean> {
    if (this.protocols.length === 0) return false;
    const changed = password !== undefined && password !== this.password;
    if (changed) {
      for (const protocol of this.protocols) await setPassword(this.qmp, protocol, password);
      this.password = password;
      this.logger.info({ displays: this.protocols }, 'display password set');
    }
    const time = expiry?.trim();
    if (this.password !== undefined && time && (changed || time !== this.expiry)) {
      for (const protocol of this.protocols) await expirePassword(this.qmp, protocol, time);
      this.expiry = time;
      this.logger.info({ expiry: time }, 'display password expiry set');
    }
    return changed;
  }
}
