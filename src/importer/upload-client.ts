// The sending side of an upload (upload.ts): a file sent in pieces, each a PATCH from where the
// server says the upload stands, so a broken piece is sent again from there (`vmop image upload`).
import { createReadStream } from 'node:fs';
import { Agent, request } from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';
import { UPLOAD_LENGTH_HEADER, UPLOAD_OFFSET_HEADER, UPLOAD_PATH, UPLOAD_TOKEN_HEADER } from './upload.js';

export interface UploadEndpoint {
  host: string;
  port: number;
  /** The name the server's certificate holds. */
  servername: string;
  /** The server's certificate (PEM): the only one it may show. */
  ca: string;
}

export interface FileUpload {
  endpoint: UploadEndpoint;
  token: string;
  file: string;
  /** The file's size in bytes. */
  length: number;
  /** Bytes a PATCH carries. */
  pieceBytes?: number;
  /** Pieces that break off before the upload gives up (each resumes where the server stands). */
  attempts?: number;
  onProgress?: (sent: number) => void;
}

const PIECE_BYTES = 32 * 1024 * 1024;

export class UploadRefused extends Error {}

interface Answer {
  status: number;
  offset: number;
  body: string;
}

function exchange(
  upload: FileUpload,
  agent: Agent,
  method: 'HEAD' | 'PATCH',
  headers: Record<string, string> = {},
  body?: { start: number; end: number },
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const { endpoint } = upload;
    const req = request(
      {
        host: endpoint.host,
        port: endpoint.port,
        servername: endpoint.servername,
        ca: endpoint.ca,
        agent,
        method,
        path: UPLOAD_PATH,
        headers: { [UPLOAD_TOKEN_HEADER]: upload.token, ...headers },
      },
      (res) => {
        let text = '';
        res.on('data', (chunk) => (text += String(chunk)));
        res.on('error', reject);
        res.on('end', () =>
          resolve({ status: res.statusCode!, offset: Number(res.headers[UPLOAD_OFFSET_HEADER]), body: text }),
        );
      },
    );
    req.on('error', reject);
    if (!body) return void req.end();
    const data = createReadStream(upload.file, {
      start: body.start,
      end: body.end - 1,
      highWaterMark: 1 << 20,
    });
    data.on('error', (err) => req.destroy(err));
    data.pipe(req);
  });
}

/** Sends the file from where the server stands to its end; resolves with the bytes sent now. */
export async function sendFile(upload: FileUpload): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const piece = upload.pieceBytes ?? PIECE_BYTES;
  let failures = 0;
  let sent = 0;
  try {
    for (;;) {
      try {
        const state = await exchange(upload, agent, 'HEAD');
        if (state.status !== 200) throw new UploadRefused(`HTTP ${state.status}: ${state.body || 'refused'}`);
        let offset = Number.isFinite(state.offset) ? state.offset : 0;
        while (offset < upload.length) {
          const end = Math.min(offset + piece, upload.length);
          const answer = await exchange(
            upload,
            agent,
            'PATCH',
            {
              [UPLOAD_OFFSET_HEADER]: String(offset),
              [UPLOAD_LENGTH_HEADER]: String(upload.length),
              'content-length': String(end - offset),
              'content-type': 'application/offset+octet-stream',
            },
            { start: offset, end },
          );
          // 409: the server still reads a piece that broke off, or stands elsewhere: ask again.
          if (answer.status === 409) throw new Error(answer.body);
          if (answer.status !== 204) throw new UploadRefused(`HTTP ${answer.status}: ${answer.body}`);
          sent += answer.offset - offset;
          offset = answer.offset;
          upload.onProgress?.(offset);
        }
        return sent;
      } catch (err) {
        if (err instanceof UploadRefused || ++failures >= (upload.attempts ?? 5)) throw err;
        // The server keeps what arrived: ask it where to go on.
        await sleep(1000);
      }
    }
  } finally {
    agent.destroy();
  }
}
