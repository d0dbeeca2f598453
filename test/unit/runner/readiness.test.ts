// A runner pod's readiness (/readyz, the pod's probe) is asked from the moment the pod runs: before
// the runner has read its config, and when an answer cannot be made, it is "not ready", never the
// end of the process (kubelet's first probe once crashed every migration target that way).
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { VmRunner } from '../../../src/runner/runner.js';
import { serveHttpEndpoints, type HttpEndpoints } from '../../../src/util/http-endpoints.js';

const logger = pino({ level: 'silent' });

describe("a runner's readiness", () => {
  let endpoints: HttpEndpoints | undefined;
  afterEach(async () => endpoints?.close());

  it('is "not ready" before the runner has read its config', () => {
    const runner = new VmRunner({ configPath: '/nonexistent/config.yaml', publish: () => undefined, logger });
    expect(runner.servesGuest()).toBe(false);
  });

  it('answers 503 when the question throws, and goes on serving', async () => {
    let throws = true;
    endpoints = await serveHttpEndpoints(0, '127.0.0.1', new Registry(), () => {
      if (throws) throw new TypeError('no store yet');
      return true;
    });
    const readyz = () => fetch(`http://127.0.0.1:${endpoints!.port}/readyz`).then((r) => r.status);
    expect(await readyz()).toBe(503);
    throws = false;
    expect(await readyz()).toBe(200);
  });
});
