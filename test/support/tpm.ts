// The guest's TPM seen from inside: PCR 16 extended through /dev/tpm0 with a raw TPM2 command
// (the test guest has no TPM tools), a state that lives only in swtpm's memory.
import { createHash } from 'node:crypto';

/** TPM2_PCR_Extend of PCR 16 (password session) with a SHA-256 digest of 32 bytes 0x01, as printf octal. */
const EXTEND_COMMAND = [
  [0x80, 0x02, 0, 0, 0, 65, 0, 0, 0x01, 0x82, 0, 0, 0, 16, 0, 0, 0, 9, 0x40, 0, 0, 9, 0, 0, 0, 0, 0],
  [0, 0, 0, 1, 0, 0x0b, ...new Array<number>(32).fill(1)],
]
  .flat()
  .map((byte) => `\\${byte.toString(8).padStart(3, '0')}`)
  .join('');
/** PCR 16 after that extend: SHA-256 of its 32 zero bytes and the digest, as the kernel shows it. */
export const PCR16_AFTER_EXTEND = createHash('sha256')
  .update(Buffer.concat([Buffer.alloc(32), Buffer.alloc(32, 1)]))
  .digest('hex')
  .toUpperCase();

/** A guest shell command that extends PCR 16 (PCRs start at zero); it exits 0 once the TPM answered. */
export const PCR16_EXTEND = `exec 3<>/dev/tpm0; printf '${EXTEND_COMMAND}' >&3; dd bs=64 count=1 <&3 >/dev/null 2>&1`;
