import { createCipheriv } from 'node:crypto';
import net from 'node:net';
import { SocketReader } from './socket-reader.js';

/*
 * A minimal VNC client: RFB 3.8 with VNC authentication (RFC 6143 §7.2.2), as a viewer does, and
 * on success the server's first message (the screen's size and name). VNC's DES: the password's
 * first 8 bytes, each byte's bits reversed, as key; single DES made of two-key triple DES with
 * both keys the same (OpenSSL 3 keeps single DES in its legacy provider).
 */

const SECURITY_VNC_AUTH = 2;

export interface VncLogin {
  /** 0: accepted; 1: refused. */
  result: number;
  /** The security types the server offered. */
  offered: number[];
  /** On success: the screen the server shares. */
  screen?: { width: number; height: number; name: string };
}

const reverseBits = (byte: number) => {
  let reversed = 0;
  for (let i = 0; i < 8; i++) reversed |= ((byte >> i) & 1) << (7 - i);
  return reversed;
};

export function vncResponse(password: string, challenge: Buffer): Buffer {
  const key = Buffer.alloc(8);
  Buffer.from(password, 'latin1')
    .subarray(0, 8)
    .forEach((byte, i) => (key[i] = reverseBits(byte)));
  const cipher = createCipheriv('des-ede-ecb', Buffer.concat([key, key]), null).setAutoPadding(false);
  return Buffer.concat([cipher.update(challenge), cipher.final()]);
}

/** Logs in at `port` with `password` and closes the connection. */
export async function vncLogin(port: number, password: string, host = '127.0.0.1'): Promise<VncLogin> {
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const connection = net.connect(port, host, () => resolve(connection)).once('error', reject);
  });
  const reader = new SocketReader(socket, 'VNC server');
  try {
    const version = (await reader.read(12)).toString('latin1');
    if (!version.startsWith('RFB ')) throw new Error(`not a VNC server: ${JSON.stringify(version)}`);
    socket.write('RFB 003.008\n');
    const count = (await reader.read(1))[0]!;
    if (count === 0) throw new Error('the VNC server refused the connection');
    const offered = [...(await reader.read(count))];
    if (!offered.includes(SECURITY_VNC_AUTH)) return { result: 1, offered };
    socket.write(Buffer.from([SECURITY_VNC_AUTH]));
    socket.write(vncResponse(password, await reader.read(16)));
    const result = (await reader.read(4)).readUInt32BE(0);
    if (result !== 0) return { result, offered };
    socket.write(Buffer.from([1])); // ClientInit: shared
    const init = await reader.read(24);
    const name = (await reader.read(init.readUInt32BE(20))).toString('utf8');
    return { result, offered, screen: { width: init.readUInt16BE(0), height: init.readUInt16BE(2), name } };
  } finally {
    socket.destroy();
  }
}
