import { describe, expect, it } from 'vitest';
import { VirtualMachineImage } from '../../../src/api/virtual-machine-image.js';
import { imageView } from '../../../src/web/image-view.js';

const image = (source: object, status?: object) =>
  VirtualMachineImage.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineImage',
    metadata: { name: 'debian', namespace: 'team-a' },
    spec: { source, storage: { size: '2Gi' } },
    ...(status && { status }),
  });

describe("the Images page's view of an image", () => {
  it('shows an import under way with its progress, and a URL without its query (a token may be in it)', () => {
    const importing = image(
      { http: { url: 'https://images.example/debian-12.qcow2?token=secret' } },
      { phase: 'Importing', progress: '42%' },
    );
    expect(imageView(importing)).toEqual({
      namespace: 'team-a',
      name: 'debian',
      phase: 'Importing',
      progress: '42%',
      size: '2Gi',
      source: 'http https://images.example/debian-12.qcow2',
    });
  });

  it('shows a Ready image with the size it holds, a failed one with why, a new one as Pending', () => {
    const ready = imageView(
      image(
        { registry: { image: 'registry.example/disks/debian:12' } },
        { phase: 'Ready', size: '3Gi', progress: '100%' },
      ),
    );
    expect(ready).toMatchObject({
      phase: 'Ready',
      size: '3Gi',
      source: 'registry registry.example/disks/debian:12',
    });
    expect(ready.progress).toBeUndefined();
    const failed = imageView(
      image({ pvc: { name: 'old-disk' } }, { phase: 'Failed', message: 'no such claim' }),
    );
    expect(failed).toMatchObject({ phase: 'Failed', message: 'no such claim', source: 'pvc old-disk' });
    expect(imageView(image({ pvc: { name: 'old-disk' } })).phase).toBe('Pending');
  });

  it('shows an upload by the SHA-256 it must have', () => {
    expect(imageView(image({ upload: { sha256: 'c'.repeat(64) } })).source).toBe(
      `upload sha256 ${'c'.repeat(64)}`,
    );
    expect(imageView(image({ upload: {} })).source).toBe('upload');
  });
});
