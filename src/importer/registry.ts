// A disk from an OCI image in a registry, laid out as KubeVirt's containerDisks are: the image
// file (qcow2 or raw, maybe compressed) under /disk/ in a layer. The layers are looked at from
// the top (the last one wins, as in a container's file system); each layer's bytes are checked
// against its digest. Anonymous pulls, with the registries' token handshake (Docker Hub, quay.io,
// ghcr.io give public images so).
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { extract } from 'tar-stream';
import { z } from 'zod';
import { ImportFailure } from './failure.js';
import { bodyBytes, expectOk, httpGet } from './http.js';
import type { Bytes } from './streams.js';

export interface ImageReference {
  registry: string;
  repository: string;
  /** A tag or a digest. */
  reference: string;
}

/** Docker's rules: the first part names a registry when it has a dot or a port or is localhost. */
export function parseImageReference(image: string): ImageReference {
  const match = /^(?:([^/]+)\/)?([a-z0-9._/-]+?)(?::([\w][\w.-]{0,127}))?(?:@(sha256:[0-9a-f]{64}))?$/.exec(
    image,
  );
  if (!match) throw new ImportFailure('ImportError', `${JSON.stringify(image)} is not an image reference`);
  const [, named, path, tag, digest] = match;
  // "team/disk" is a repository on Docker Hub; "registry.example/disk" names a registry.
  const isRegistry = named !== undefined && (/[.:]/.test(named) || named === 'localhost');
  const first = isRegistry ? named : undefined;
  const rest = isRegistry || named === undefined ? path! : `${named}/${path!}`;
  const registry = first ?? 'docker.io';
  const dockerHub = registry === 'docker.io';
  return {
    registry: dockerHub ? 'registry-1.docker.io' : registry,
    repository: dockerHub && !rest.includes('/') ? `library/${rest}` : rest,
    reference: digest ?? tag ?? 'latest',
  };
}

const Descriptor = z.object({
  mediaType: z.string().optional(),
  digest: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  size: z.number().optional(),
  platform: z.object({ os: z.string(), architecture: z.string() }).optional(),
});
const Manifest = z.object({
  mediaType: z.string().optional(),
  manifests: z.array(Descriptor).optional(),
  layers: z.array(Descriptor).optional(),
});

const ACCEPT = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
].join(', ');

/** A file under /disk/ (KubeVirt's containerDisk layout). */
const isDisk = (name: string) => /^(?:\.\/)?\/?disk\/[^/]+$/.test(name);

export interface RegistryImage {
  /** The disk file's bytes. */
  data: Bytes;
  /** Says where it came from, once it was read whole (the layer's digest was checked). */
  provenance(): string;
}

/**
 * Opens the disk in `image`; `onBytes(downloaded, total)` counts the layer bytes. `insecure`:
 * the registry speaks plain HTTP (a registry inside the cluster, say).
 */
export async function openRegistryImage(
  image: string,
  insecure: boolean,
  onBytes: (bytes: number, total?: number) => void,
): Promise<RegistryImage> {
  const ref = parseImageReference(image);
  const base = `${insecure ? 'http' : 'https'}://${ref.registry}/v2/${ref.repository}`;
  let authorization: string | undefined;
  const get = async (path: string, accept?: string) => {
    const headers = (): Record<string, string> => ({
      ...(accept && { Accept: accept }),
      ...(authorization && { Authorization: authorization }),
    });
    let response = await httpGet(`${base}${path}`, headers());
    const challenge = response.status === 401 ? response.headers.get('www-authenticate') : null;
    if (challenge?.startsWith('Bearer ')) {
      authorization = `Bearer ${await bearerToken(challenge)}`;
      response = await httpGet(`${base}${path}`, headers());
    }
    return expectOk(response, `the registry of ${image}`);
  };
  const manifestOf = async (reference: string) =>
    Manifest.parse(await (await get(`/manifests/${reference}`, ACCEPT)).json());
  let manifest = await manifestOf(ref.reference);
  if (manifest.manifests) {
    const chosen =
      manifest.manifests.find((m) => m.platform?.os === 'linux' && m.platform.architecture === 'amd64') ??
      manifest.manifests[0];
    if (!chosen) throw noDisk(image);
    manifest = await manifestOf(chosen.digest);
  }
  const layers = [...(manifest.layers ?? [])].reverse();
  let found: string | undefined;
  async function* disk(): Bytes {
    for (const layer of layers) {
      const hash = createHash('sha256');
      let bytes = 0;
      const blob = bodyBytes(await get(`/blobs/${layer.digest}`), (chunk) => {
        hash.update(chunk);
        bytes += chunk.length;
        onBytes(bytes, layer.size);
      });
      const tar = extract();
      const input = Readable.from(blob);
      const gzipped = layer.mediaType?.endsWith('gzip') ?? true;
      const unpacked = gzipped ? input.pipe(createGunzip()) : input;
      input.on('error', (err) => unpacked.destroy(err));
      unpacked.on('error', (err) => tar.destroy(err));
      unpacked.pipe(tar);
      for await (const entry of tar) {
        if (found === undefined && entry.header.type === 'file' && isDisk(entry.header.name)) {
          found = layer.digest;
          for await (const chunk of entry) yield chunk as Buffer;
        } else entry.resume();
      }
      // The whole layer went by: its digest says whether it is the one the manifest names.
      if (`sha256:${hash.digest('hex')}` !== layer.digest)
        throw new ImportFailure(
          'ChecksumMismatch',
          `layer ${layer.digest} of ${image} does not match its digest`,
        );
      if (found) return;
    }
    throw noDisk(image);
  }
  return { data: disk(), provenance: () => `${image}, layer ${found}` };
}

const noDisk = (image: string) =>
  new ImportFailure('NoDisk', `${image} holds no disk: no file under /disk/ in any of its layers`);

/** The token a registry's Bearer challenge asks for (anonymous). */
async function bearerToken(challenge: string): Promise<string> {
  const params = Object.fromEntries(
    [...challenge.slice('Bearer '.length).matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]),
  );
  if (!params.realm)
    throw new ImportFailure('HttpError', `the registry's challenge names no realm: ${challenge}`);
  const url = new URL(params.realm);
  for (const key of ['service', 'scope']) if (params[key]) url.searchParams.set(key, params[key]);
  const body = z
    .object({ token: z.string().optional(), access_token: z.string().optional() })
    .parse(await expectOk(await httpGet(url.toString()), `the token service ${url.host}`).json());
  const token = body.token ?? body.access_token;
  if (!token) throw new ImportFailure('HttpError', `the token service ${url.host} gave no token`);
  return token;
}
