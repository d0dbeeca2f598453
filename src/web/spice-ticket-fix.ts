// spice-html5 0.2.1 sends the SPICE ticket (the console's password, RSA-encrypted) as the
// ciphertext's hex digits without leading zeros: when the ciphertext's top byte is 0 (1 time in
// 256) it is a byte short, the server reads it shifted, and refuses the password ("failed to
// decrypt RSA encrypted password: data too large for modulus" in QEMU's log, "Permission denied"
// in the page). Seen in an e2e run. The web GUI serves its ticket.js with the ciphertext padded to
// the key's length, as OpenSSL's RSA_public_encrypt gives it. (spice-html5 is LGPL-3.0-or-later;
// this is a modification of its ticket.js, served as such.)

const UNPADDED = `    var h = enc.toString(16);
    if ((h.length & 1) != 0)
        h = "0" + h;`;
const PADDED = `    var h = enc.toString(16);
    /* vmop: padded to the key's length (leading zero bytes kept), see src/web/spice-ticket-fix.ts */
    while (h.length < ((rsa.n.bitLength()+7)>>3) * 2)
        h = "0" + h;`;

/** spice-html5's ticket.js with the fix; throws when its code is not as expected (another version). */
export function fixedSpiceTicket(source: string): string {
  if (!source.includes(UNPADDED))
    throw new Error('spice-html5 ticket.js is not the version vmop fixes (see src/web/spice-ticket-fix.ts)');
  return source.replace(UNPADDED, PADDED);
}
