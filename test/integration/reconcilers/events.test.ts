// Events against a real apiserver: repeats are counted in one series, as `kubectl describe` shows
// them, also when several replicas record the same one at once.
import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeKubeClients } from '../../../src/kube/clients.js';
import { eventRecorder, type EventObject } from '../../../src/reconcilers/events.js';
import { createLogger } from '../../../src/util/logger.js';
import { createTestNamespace, sharedKubeConfig, type TestNamespace } from '../../support/kube.js';

const kubeConfig = sharedKubeConfig();
const core = kubeConfig.makeApiClient(CoreV1Api);

describe('Event series (real apiserver)', () => {
  let namespace: TestNamespace;
  let object: EventObject;
  const warnings: string[] = [];
  const logger = createLogger('events-test');
  logger.warn = ((details: unknown, message: string) =>
    warnings.push(`${message} ${JSON.stringify(details)}`)) as never;
  let clock = Date.parse('2026-11-25T10:00:00Z');
  const record = eventRecorder(makeKubeClients(kubeConfig), logger, () => new Date((clock += 1000)));
  const eventsOf = async () =>
    (
      await core.listNamespacedEvent({
        namespace: namespace.name,
        fieldSelector: `involvedObject.uid=${object.uid}`,
      })
    ).items;

  beforeAll(async () => {
    namespace = await createTestNamespace(kubeConfig, 'vmop-events');
    const configMap = await core.createNamespacedConfigMap({
      namespace: namespace.name,
      body: { metadata: { name: 'involved' } },
    });
    object = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      name: 'involved',
      namespace: namespace.name,
      uid: configMap.metadata!.uid!,
    };
  });
  afterAll(() => namespace?.cleanup());

  it('counts repeats in one Event, a different message in another', async () => {
    const failed = { type: 'Warning' as const, reason: 'Failed', message: 'qemu was killed' };
    await record(object, failed);
    await record(object, failed);
    await record(object, { ...failed, count: 3 });
    await record(object, { ...failed, message: 'qemu exited with code 1' });
    const events = await eventsOf();
    expect(events.map((e) => [e.message, e.count]).sort()).toEqual([
      ['qemu exited with code 1', 1],
      ['qemu was killed', 5],
    ]);
    const series = events.find((e) => e.message === 'qemu was killed')!;
    expect(new Date(series.lastTimestamp!).getTime()).toBeGreaterThan(
      new Date(series.firstTimestamp!).getTime(),
    );
    expect(warnings).toEqual([]);
  });

  it('loses no count when replicas record the same Event at once', async () => {
    const restarted = { type: 'Normal' as const, reason: 'Restarted', message: 'at once' };
    await record(object, restarted);
    await Promise.all(Array.from({ length: 8 }, () => record(object, restarted)));
    const series = (await eventsOf()).filter((e) => e.reason === 'Restarted');
    expect(series.map((e) => e.count)).toEqual([9]);
    expect(warnings).toEqual([]);
  });
});
