import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { apiserverRejection, readableApiError } from '../../src/kube/clients.js';

const status = (code: number, message: string) =>
  new ApiException(code, 'Unknown API Status Code!', JSON.stringify({ kind: 'Status', code, message }), {});

describe('apiserver errors', () => {
  it('treats a 4xx that a retry cannot fix as a rejection, with the apiserver message', () => {
    expect(apiserverRejection(status(422, 'StatefulSet "x" is invalid'))).toBe('StatefulSet "x" is invalid');
    expect(apiserverRejection(status(400, 'metadata.labels: Invalid value'))).toBe(
      'metadata.labels: Invalid value',
    );
  });

  it('leaves what a retry can fix to the retry: conflicts, throttling, gone objects, server errors', () => {
    for (const code of [401, 404, 408, 409, 429, 500, 503]) {
      expect(apiserverRejection(status(code, 'x'))).toBeUndefined();
    }
    expect(apiserverRejection(new Error('ECONNREFUSED'))).toBeUndefined();
  });

  it("turns client-node's 'Unknown API Status Code!' into the code and the apiserver's message", () => {
    expect((readableApiError(status(503, 'etcd is down')) as Error).message).toBe(
      'HTTP 503 from the apiserver: etcd is down',
    );
    const other = new Error('socket hang up');
    expect(readableApiError(other)).toBe(other);
  });
});
