// What the GUI's Images page shows of a VirtualMachineImage (pure): where it comes from, how far
// its import is, and what went wrong. URLs are shown without their query, which may hold a token.
import type { VirtualMachineImage } from '../api/virtual-machine-image.js';

export interface ImageView {
  namespace: string;
  name: string;
  /** Pending, Importing, Ready or Failed; Pending until the controller has looked at it. */
  phase: string;
  /** While importing, e.g. "42%". */
  progress?: string;
  /** The claim's capacity once Ready, else the size asked for. */
  size: string;
  /** Where it comes from: `http <url>`, `registry <image>`, `pvc <claim>` or `upload sha256 <hex>`. */
  source: string;
  message?: string;
}

function sourceOf(image: VirtualMachineImage): string {
  const { http, registry, pvc, upload } = image.spec.source;
  if (upload) return upload.sha256 ? `upload sha256 ${upload.sha256}` : 'upload';
  if (http) {
    const url = new URL(http.url);
    return `http ${url.origin}${url.pathname}`;
  }
  if (registry) return `registry ${registry.image}`;
  return `pvc ${pvc?.name ?? ''}`;
}

export function imageView(image: VirtualMachineImage): ImageView {
  const { status } = image;
  return {
    namespace: image.metadata.namespace ?? '',
    name: image.metadata.name,
    phase: status?.phase ?? 'Pending',
    ...(status?.phase === 'Importing' && status.progress && { progress: status.progress }),
    size: status?.size ?? String(image.spec.storage.size),
    source: sourceOf(image),
    ...(status?.message && { message: status.message }),
  };
}
