import type net from 'node:net';

/** Reads exact byte counts from a socket, as binary protocols need. */
export class SocketReader {
  private buffer = Buffer.alloc(0);
  private waiting: (() => void) | undefined;
  private ended = false;

  constructor(
    socket: net.Socket,
    private readonly peer: string,
  ) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.waiting?.();
    });
    socket.on('close', () => {
      this.ended = true;
      this.waiting?.();
    });
  }

  async read(bytes: number): Promise<Buffer> {
    while (this.buffer.length < bytes) {
      if (this.ended) throw new Error(`${this.peer} closed the connection`);
      await new Promise<void>((resolve) => (this.waiting = resolve));
    }
    const data = this.buffer.subarray(0, bytes);
    this.buffer = this.buffer.subarray(bytes);
    return data;
  }
}
