// The SPICE ticket the page sends: spice-html5's own RSA code, run here as the browser runs it,
// with the key QEMU would send (1024-bit), decrypted as QEMU decrypts it (OAEP, SHA-1).
import { constants, generateKeyPairSync, privateDecrypt } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { SPICE_DIR } from '../../../src/web/server.js';
import { fixedSpiceTicket } from '../../../src/web/spice-ticket-fix.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'spice-ticket-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** spice-html5's ticket.js (as served, or as it comes) beside its thirdparty modules. */
async function loadTicket(name: string, source: string) {
  // jsbn picks its arithmetic by the browser's name at load (Node 20 has no navigator).
  (globalThis as { navigator?: object }).navigator ??= { appName: 'Netscape' };
  cpSync(path.join(SPICE_DIR, 'thirdparty'), path.join(dir, 'thirdparty'), { recursive: true });
  writeFileSync(path.join(dir, `${name}.mjs`), source);
  return (await import(pathToFileURL(path.join(dir, `${name}.mjs`)).href)) as {
    create_rsa_from_mb(mb: ArrayBuffer, at: number): unknown;
    rsa_encrypt(rsa: unknown, text: string): number[];
  };
}

const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 1024 });
const der = publicKey.export({ type: 'spki', format: 'der' });
const password = 'one-time-pw';
/** What the page sends for 1500 tickets: the unfixed code sends a short one 1 time in 256 (99.7% of runs see one). */
async function tickets(name: string, source: string) {
  const ticket = await loadTicket(name, source);
  const key = ticket.create_rsa_from_mb(new Uint8Array(der).buffer, 0);
  return Array.from({ length: 1500 }, () => ticket.rsa_encrypt(key, `${password}\0`));
}

describe('the SPICE ticket the web GUI sends', () => {
  const upstream = readFileSync(path.join(SPICE_DIR, 'ticket.js'), 'utf8');

  it('is always as long as the key and decrypts to the password, also when its top byte is 0', async () => {
    const sent = await tickets('fixed', fixedSpiceTicket(upstream));
    expect(new Set(sent.map((t) => t.length))).toEqual(new Set([128]));
    const leadingZero = sent.filter((t) => t[0] === 0);
    for (const t of [...leadingZero, sent[0]!]) {
      const clear = privateDecrypt(
        { key: privateKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha1' },
        Buffer.from(t),
      );
      expect(clear.toString()).toBe(`${password}\0`);
    }
  });

  it('refuses another spice-html5 version, so the fix is not silently lost', () => {
    expect(() => fixedSpiceTicket('var h = enc.toString(16);')).toThrow(/not the version vmop fixes/);
  });
});
