// GET over HTTP(S) for an import: what may work when tried again (the network, 5xx, 429) is told
// from what will not (a 4xx), and a body's bytes are counted as they arrive. Every hop (redirects
// followed here, not by fetch) goes only where the destination guard allows.
import { Readable } from 'node:stream';
import { Agent, fetch as undiciFetch } from 'undici';
import type { DestinationGuard } from './destinations.js';
import { pinnedLookup } from './destinations.js';
import { ImportFailure, RetryableDownload, describeError } from './failure.js';
import type { Bytes } from './streams.js';

const MAX_REDIRECTS = 10;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** Set once when the importer starts (`vmop import`): the whole process imports one disk. */
let guard: DestinationGuard | undefined;
export function guardDestinations(destinationGuard: DestinationGuard): void {
  guard = destinationGuard;
}

/**
 * The response, whatever its status but 5xx and 429 (retryable, as are network errors). `ca`: PEM
 * certificates an https server's must chain to, instead of the system's CAs.
 */
export async function httpGet(
  url: string,
  headers: Record<string, string> = {},
  options: { ca?: string } = {},
): Promise<Response> {
  let target = new URL(url);
  let sent = headers;
  for (let hop = 0; ; hop++) {
    const addresses = guard && (await guard.check(target));
    const connect = {
      ...(addresses && { lookup: pinnedLookup(addresses) }),
      ...(options.ca && { ca: options.ca }),
    };
    const dispatcher = Object.keys(connect).length > 0 ? new Agent({ connect }) : undefined;
    const response = (await undiciFetch(target, { redirect: 'manual', headers: sent, dispatcher }).catch(
      (err: unknown) => {
        throw new RetryableDownload('Unreachable', describeError(err));
      },
    )) as unknown as Response;
    const location = response.headers.get('location');
    if (REDIRECTS.has(response.status) && location) {
      if (hop >= MAX_REDIRECTS)
        throw new ImportFailure('HttpError', `${url}: more than ${MAX_REDIRECTS} redirects`);
      await response.body?.cancel();
      const next = new URL(location, target);
      if (next.origin !== target.origin) sent = {}; // credentials stay with their origin
      target = next;
      continue;
    }
    if (response.status >= 500 || response.status === 429)
      throw new RetryableDownload('HttpError', statusOf(response));
    return response;
  }
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
