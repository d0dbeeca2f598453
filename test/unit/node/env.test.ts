import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { envReferences, resolveEnv, type EnvSources } from '../../../src/node/runtime/env.js';

const pod: V1Pod = {
  metadata: { name: 'vm-0', namespace: 'ns', uid: 'u1', labels: { app: 'x' } },
  spec: { nodeName: 'here', containers: [] },
};
const container = (env: V1Container['env']): V1Container => ({ name: 'runner', env });
const none: EnvSources = { configMaps: new Map(), secrets: new Map() };
const redisRef = { secretKeyRef: { name: 'redis', key: 'url', optional: true } };

describe('container environment', () => {
  it('resolves literal values and the downward API', () => {
    const result = resolveEnv(
      pod,
      container([
        { name: 'KEY', value: 'vm:ns/vm' },
        { name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
        { name: 'UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } },
        { name: 'NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
        { name: 'APP', valueFrom: { fieldRef: { fieldPath: "metadata.labels['app']" } } },
      ]),
      none,
      {},
      '127.0.0.1',
    );
    expect(result).toEqual({ env: { KEY: 'vm:ns/vm', POD: 'vm-0', UID: 'u1', NODE: 'here', APP: 'x' } });
  });

  it("keeps the node's default when an optional reference does not resolve, and lets a resolved one win", () => {
    const env = container([{ name: 'VMOP_REDIS_URL', valueFrom: redisRef }]);
    const defaults = { VMOP_REDIS_URL: 'redis://default' };
    expect(resolveEnv(pod, env, none, defaults, '')).toEqual({ env: defaults });
    const secrets = new Map([['redis', { url: 'redis://from-secret' }]]);
    expect(resolveEnv(pod, env, { ...none, secrets }, defaults, '')).toEqual({
      env: { VMOP_REDIS_URL: 'redis://from-secret' },
    });
  });

  it('names what is missing when a required reference does not resolve', () => {
    const env = container([{ name: 'A', valueFrom: { configMapKeyRef: { name: 'cm', key: 'k' } } }]);
    expect(resolveEnv(pod, env, none, {}, '')).toEqual({ error: 'env A: configmap "cm" not found' });
    const configMaps = new Map([['cm', { other: 'v' }]]);
    expect(resolveEnv(pod, env, { ...none, configMaps }, {}, '')).toEqual({
      error: 'env A: key "k" not found in configmap cm',
    });
  });

  it('lists the objects to look up', () => {
    expect(
      envReferences(
        container([
          { name: 'R', valueFrom: redisRef },
          { name: 'V', value: '1' },
        ]),
      ),
    ).toEqual({
      configMaps: [],
      secrets: ['redis'],
    });
  });
});
