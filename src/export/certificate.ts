// The TLS certificate of one VirtualMachineExport's server: made by the manager with the export,
// self-signed for the Service's names, valid a little past the export's expiry, and published in
// the export's status so that whoever downloads (a VM's `source.http.caCertificate`, `curl
// --cacert`, `vmop vm export -o`) trusts exactly this server (KubeVirt publishes its export
// server's certificate in the status the same way).
import { generateKeyPair, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import forge from 'node-forge';

/** A Secret's keys of a certificate and its key (those of a `kubernetes.io/tls` Secret). */
export const TLS_CERT = 'tls.crt';
export const TLS_KEY = 'tls.key';

export interface ServerCertificate {
  /** PEM. */
  cert: string;
  /** PEM (PKCS#8). */
  key: string;
}

/** Clocks of nodes differ: valid from a little before now. */
const BACKDATE_MS = 5 * 60_000;

const newKeyPair = promisify(generateKeyPair);

export async function selfSignedCertificate(
  hostnames: string[],
  notAfter: Date,
  now: Date = new Date(),
): Promise<ServerCertificate> {
  // The key pair by Node's crypto (native, off the event loop: an RSA key takes up to a second);
  // node-forge only assembles and signs the certificate.
  const { publicKey, privateKey } = await newKeyPair('rsa', { modulusLength: 2048 });
  const key = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }) as string);
  // A positive serial: the first byte's high bit clear.
  cert.serialNumber = `0${randomBytes(15).toString('hex')}`;
  cert.validity.notBefore = new Date(now.getTime() - BACKDATE_MS);
  cert.validity.notAfter = notAfter;
  const subject = [{ name: 'commonName', value: hostnames[0]! }];
  cert.setSubject(subject);
  cert.setIssuer(subject);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', critical: true, digitalSignature: true, keyEncipherment: true },
    { name: 'extKeyUsage', serverAuth: true },
    { name: 'subjectAltName', altNames: hostnames.map((value) => ({ type: 2, value })) },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(key), forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(cert), key };
}
