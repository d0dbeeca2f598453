import { constants, createPublicKey, publicEncrypt } from 'node:crypto';
import net from 'node:net';
import { SocketReader } from './socket-reader.js';

/*
 * A minimal SPICE client: links the main channel with a ticket (password), as a viewer does, and
 * reports the server's verdict. Protocol: spice-protocol's SpiceLinkHeader/SpiceLinkMess/
 * SpiceLinkReply; the ticket is RSA-OAEP encrypted with the key from the reply.
 */

const SPICE_MAGIC = 0x51444552; // "REDQ"
const LINK_MESS_SIZE = 18;
const PUBKEY_BYTES = 162;
const CHANNEL_MAIN = 1;
export const SPICE_LINK_OK = 0;
export const SPICE_LINK_PERMISSION_DENIED = 7;

export interface SpiceSession {
  /** SPICE_LINK_OK, or e.g. SPICE_LINK_PERMISSION_DENIED. */
  result: number;
  close(): void;
}

/** Links the main channel with `password`; keep the session open to stay connected. */
export async function spiceLogin(port: number, password: string, host = '127.0.0.1'): Promise<SpiceSession> {
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const connection = net.connect(port, host, () => resolve(connection)).once('error', reject);
  });
  const reader = new SocketReader(socket, 'SPICE server');
  try {
    const link = Buffer.alloc(16 + LINK_MESS_SIZE);
    link.writeUInt32LE(SPICE_MAGIC, 0);
    link.writeUInt32LE(2, 4); // protocol 2.2
    link.writeUInt32LE(2, 8);
    link.writeUInt32LE(LINK_MESS_SIZE, 12);
    link.writeUInt32LE(0, 16); // new session
    link.writeUInt8(CHANNEL_MAIN, 20);
    link.writeUInt8(0, 21);
    link.writeUInt32LE(0, 22); // no common capabilities: plain ticket authentication
    link.writeUInt32LE(0, 26);
    link.writeUInt32LE(LINK_MESS_SIZE, 30);
    socket.write(link);

    const header = await reader.read(16);
    if (header.readUInt32LE(0) !== SPICE_MAGIC) throw new Error('not a SPICE server');
    const reply = await reader.read(header.readUInt32LE(12));
    const error = reply.readUInt32LE(0);
    if (error !== SPICE_LINK_OK) return { result: error, close: () => socket.destroy() };
    const key = createPublicKey({ key: reply.subarray(4, 4 + PUBKEY_BYTES), format: 'der', type: 'spki' });
    const ticket = Buffer.concat([Buffer.from(password, 'utf8'), Buffer.from([0])]);
    socket.write(publicEncrypt({ key, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha1' }, ticket));
    const result = (await reader.read(4)).readUInt32LE(0);
    return { result, close: () => socket.destroy() };
  } catch (err) {
    socket.destroy();
    throw err;
  }
}
