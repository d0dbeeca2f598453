// GET over HTTP(S) for an import: what may work when tried again (the network, 5xx, 429) is told
// from what will not (a 4xx), and a body's bytes are counted as they arrive.
import { Readable } from 'node:stream';
import { ImportFailure, RetryableDownload, describeError } from './failure.js';
import type { Bytes } from './streams.js';

/** The response, whatever its status but 5xx and 429 (retryable, as are network errors). */
export async function httpGet(url: string, headers: Record<string, string> = {}): Promise<Response> {
  const response = await fetch(url, { redirect: 'follow', headers }).catch((err: unknown) => {
    throw new RetryableDownload('Unreachable', describeError(err));
  });
  if (response.status >= 500 || response.status === 429)
    throw new RetryableDownload('HttpError', statusOf(response));
  return response;
}

const statusOf = (response: Response) => `HTTP ${response.status} ${response.statusText}`.trim();

/** The response when it is a success with a body; else the import fails (`what` names the request). */
export function expectOk(response: Response, what: string): Response & { body: ReadableStream } {
  if (!response.ok || !response.body)
    throw new ImportFailure('HttpError', `${what} answered ${statusOf(response)}`);
  return response as Response & { body: ReadableStream };
}

/** The body's bytes; `onChunk` sees each; a connection that breaks off may work when tried again. */
export async function* bodyBytes(response: Response, onChunk: (chunk: Buffer) => void): Bytes {
  const body = Readable.fromWeb(response.body as never);
  let bytes = 0;
  try {
    for await (const chunk of body) {
      bytes += (chunk as Buffer).length;
      onChunk(chunk as Buffer);
      yield chunk as Buffer;
    }
  } catch (err) {
    throw new RetryableDownload(
      'Unreachable',
      `the download broke off after ${bytes} bytes: ${describeError(err)}`,
    );
  } finally {
    body.destroy();
  }
}
