import path from 'node:path';
import type { Logger } from '../../util/logger.js';
import { expirePassword, setPassword, type QmpExecutor } from '../qmp/commands.js';

export const DISPLAY_PASSWORD_FILE = 'display-password';
export const PASSWORD_EXPIRY_FILE = 'password-expiry';

/** The files of the display secret (projected next to the config, as upstream does). */
export function displaySecretFiles(dir: string) {
  return { password: path.join(dir, DISPLAY_PASSWORD_FILE), expiry: path.join(dir, PASSWORD_EXPIRY_FILE) };
}

/** Sets the SPICE display password and its expiry when they change. The password is never logged. */
export class DisplayController {
  private password: string | undefined;
  private expiry: string | undefined;

  constructor(
    private readonly qmp: QmpExecutor,
    private readonly logger: Logger,
  ) {}

  /** Returns whether the password was changed. expiry: "now", "never", "+SECONDS" or epoch seconds. */
  async apply(password: string | undefined, expiry: string | undefined): Promise<boolean> {
    const changed = password !== undefined && password !== this.password;
    if (changed) {
      await setPassword(this.qmp, 'spice', password);
      this.password = password;
      this.logger.info('display password set');
    }
    const time = expiry?.trim();
    if (this.password !== undefined && time && (changed || time !== this.expiry)) {
      await expirePassword(this.qmp, 'spice', time);
      this.expiry = time;
      this.logger.info({ expiry: time }, 'display password expiry set');
    }
    return changed;
  }
}
