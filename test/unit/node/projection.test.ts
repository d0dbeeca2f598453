import { describe, expect, it } from 'vitest';
import { configMapPayload, secretPayload } from '../../../src/node/volumes/projection.js';

const files = (result: ReturnType<typeof configMapPayload>) =>
  'payload' in result
    ? Object.fromEntries(
        [...result.payload].map(([file, { content, mode }]) => [
          file,
          [content.toString(), mode.toString(8)],
        ]),
      )
    : result;

describe('ConfigMap and Secret volume contents', () => {
  it('projects every key, text and binary, with the default mode', () => {
    const configMap = {
      data: { 'config.yaml': 'a: 1' },
      binaryData: { blob: Buffer.from('bin').toString('base64') },
    };
    expect(files(configMapPayload({ name: 'cm', defaultMode: 0o644 }, configMap))).toEqual({
      'config.yaml': ['a: 1', '644'],
      blob: ['bin', '644'],
    });
  });

  it('projects only the listed items, at their paths and modes', () => {
    const source = { name: 'cm', items: [{ key: 'a', path: 'dir/renamed', mode: 0o600 }] };
    expect(files(configMapPayload(source, { data: { a: 'x', b: 'y' } }))).toEqual({
      'dir/renamed': ['x', '600'],
    });
  });

  it('waits for a missing object unless the volume is optional', () => {
    expect(configMapPayload({ name: 'cm' }, undefined)).toEqual({ error: 'configmap "cm" not found' });
    expect(files(configMapPayload({ name: 'cm', optional: true }, undefined))).toEqual({});
    expect(configMapPayload({ name: 'cm', items: [{ key: 'k', path: 'k' }] }, { data: {} })).toEqual({
      error: 'configmap cm: key "k" not found',
    });
  });

  it('decodes Secret data and never makes it readable by group or others', () => {
    const secret = { data: { 'display-password': Buffer.from('s3cret').toString('base64') } };
    expect(files(secretPayload({ secretName: 'pw', defaultMode: 0o644 }, secret))).toEqual({
      'display-password': ['s3cret', '600'],
    });
  });

  it('refuses item paths that leave the volume', () => {
    expect(
      configMapPayload({ name: 'cm', items: [{ key: 'a', path: '../a' }] }, { data: { a: 'x' } }),
    ).toEqual({
      error: 'configmap cm: invalid path ../a',
    });
  });
});
