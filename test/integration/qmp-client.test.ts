import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  QmpClient,
  QmpClosedError,
  QmpError,
  QmpTimeoutError,
  type QmpEvent,
} from '../../src/runner/qmp/client.js';
import { eventually } from '../support/eventually.js';
import { launchQemu, type TestQemu } from '../support/qemu.js';

describe('QMP client against a real qemu (paused, no guest)', () => {
  let qemu: TestQemu;
  let client: QmpClient;
  beforeEach(async () => {
    qemu = await launchQemu(['-name', 'vmop-qmp-test'], { paused: true });
    client = await QmpClient.connect(qemu.qmpSocket);
  });
  afterEach(async () => {
    await client?.close();
    await qemu?.stop();
  });

  it('reads the greeting and negotiates capabilities, so commands run', async () => {
    const version = await client.execute<{ qemu: { major: number; minor: number; micro: number } }>(
      'query-version',
    );
    expect(client.greeting.QMP.version.qemu).toEqual(version.qemu);
    expect(await client.execute('query-status')).toMatchObject({ status: 'prelaunch', running: false });
  });

  it('matches replies to concurrent commands by request id', async () => {
    const commands = Array.from(
      { length: 30 },
      (_, i) => ['query-name', 'query-status', 'query-kvm'][i % 3]!,
    );
    const replies = await Promise.all(commands.map((command) => client.execute(command)));
    replies.forEach((reply, i) => {
      if (commands[i] === 'query-name') expect(reply).toEqual({ name: 'vmop-qmp-test' });
      if (commands[i] === 'query-status') expect(reply).toMatchObject({ status: 'prelaunch' });
      if (commands[i] === 'query-kvm')
        expect(reply).toEqual({ enabled: false, present: expect.any(Boolean) });
    });
  });

  it('rejects a failing command with a QmpError and stays usable', async () => {
    const unknown = client.execute('no-such-command');
    await expect(unknown).rejects.toBeInstanceOf(QmpError);
    await expect(unknown).rejects.toMatchObject({ qmpClass: 'CommandNotFound', command: 'no-such-command' });
    await expect(client.execute('balloon', { value: 'lots' })).rejects.toMatchObject({
      qmpClass: 'GenericError',
      message: expect.stringContaining('balloon'),
    });
    expect(await client.execute('query-name')).toEqual({ name: 'vmop-qmp-test' });
  });

  it('delivers events to listeners and to waitForEvent', async () => {
    const seen: QmpEvent[] = [];
    client.on('event', (event: QmpEvent) => seen.push(event));
    const resumed = client.waitForEvent('RESUME');
    await client.execute('cont');
    expect((await resumed).timestamp.seconds).toBeGreaterThan(0);
    const stopped = client.waitForEvent('STOP');
    await client.execute('stop');
    await stopped;
    expect(seen.map((event) => event.event)).toEqual(['RESUME', 'STOP']);
  });

  it('waits for the event whose data matches', async () => {
    const closed = once(client, 'close');
    const shutdown = client.waitForEvent('SHUTDOWN', { match: (data) => data.reason === 'host-qmp-quit' });
    await client.execute('quit');
    expect((await shutdown).data).toEqual({ guest: false, reason: 'host-qmp-quit' });
    // qemu quits after the reply: the client reports the lost connection.
    const [error] = await closed;
    expect(error).toBeInstanceOf(QmpClosedError);
    expect((await qemu.exited).code).toBe(0);
  });

  it('rejects waitForEvent with a QmpTimeoutError when the event does not come', async () => {
    await expect(client.waitForEvent('RESUME', { timeoutMs: 200 })).rejects.toBeInstanceOf(QmpTimeoutError);
  });

  it('times a command out, and its late reply does not confuse later commands', async () => {
    qemu.kill('SIGSTOP');
    try {
      await expect(client.execute('query-status', undefined, { timeoutMs: 200 })).rejects.toBeInstanceOf(
        QmpTimeoutError,
      );
    } finally {
      qemu.kill('SIGCONT');
    }
    expect(await client.execute('query-name')).toEqual({ name: 'vmop-qmp-test' });
    expect(client.closed).toBe(false);
  });

  it('fails pending and later commands with a clear error when qemu dies mid-command', async () => {
    qemu.kill('SIGSTOP'); // qemu cannot answer: the command stays in flight
    const inFlight = client.execute('query-status');
    const event = client.waitForEvent('RESUME');
    const closed = once(client, 'close');
    qemu.kill('SIGKILL');

    await expect(inFlight).rejects.toBeInstanceOf(QmpClosedError);
    await expect(inFlight).rejects.toThrow(/connection closed \(qemu exited\?\).*query-status/);
    await expect(event).rejects.toThrow(/connection closed \(qemu exited\?\).*RESUME/);
    const [error] = await closed;
    expect(error).toBeInstanceOf(QmpClosedError);
    expect(client.closed).toBe(true);
    await expect(client.execute('query-name')).rejects.toThrow(/qemu exited\?.*cannot run query-name/);
  });

  it('close() rejects waiting commands and emits close without an error', async () => {
    qemu.kill('SIGSTOP');
    try {
      const inFlight = client.execute('query-status');
      const closed = once(client, 'close');
      await client.close();
      await expect(inFlight).rejects.toThrow(/closed by the client/);
      expect(await closed).toEqual([]);
      expect(client.closed).toBe(true);
    } finally {
      qemu.kill('SIGCONT');
    }
  });
});

describe('QMP client connecting', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'vmop-qmp-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('waits for a qemu that is still starting', async () => {
    const socket = path.join(dir, 'late.sock');
    const connecting = QmpClient.connect(socket);
    // A second QMP monitor on the socket the client already tries to reach.
    const qemu = await launchQemu(['-qmp', `unix:${socket},server=on,wait=off`], { paused: true });
    try {
      const client = await connecting;
      expect(await client.execute('query-status')).toMatchObject({ status: 'prelaunch' });
      await client.close();
    } finally {
      await qemu.stop();
    }
  });

  it('gives up with a clear error when no qemu comes', async () => {
    const socket = path.join(dir, 'nobody.sock');
    await expect(QmpClient.connect(socket, { connectTimeoutMs: 300 })).rejects.toThrow(
      `cannot connect to QMP socket ${socket} within 300 ms`,
    );
  });

  it('gives up when qemu accepts the connection but never greets', async () => {
    const qemu = await launchQemu([], { paused: true });
    try {
      await QmpClient.connect(qemu.qmpSocket, { connectTimeoutMs: 60_000 }).then((client) => client.close());
      qemu.kill('SIGSTOP'); // the kernel still accepts connections; qemu cannot greet
      // The stop is asynchronous: a qemu still running for a moment would greet after all.
      await eventually(() => expect(readFileSync(`/proc/${qemu.pid}/stat`, 'utf8').split(' ')[2]).toBe('T'));
      await expect(QmpClient.connect(qemu.qmpSocket, { connectTimeoutMs: 300 })).rejects.toThrow(
        'no QMP greeting within',
      );
    } finally {
      await qemu.stop();
    }
  });

  it('logs and skips garbage from a fake QMP peer (real qemu never sends any)', async () => {
    const socket = path.join(dir, 'fake-qmp.sock');
    const fakePeer = net.createServer((connection) => {
      connection.write('{"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}, "package": ""}, ');
      connection.write('"capabilities": []}}\r\n');
      let received = '';
      connection.on('data', (chunk) => {
        received += chunk.toString();
        const lines = received.split('\n');
        received = lines.pop()!;
        for (const line of lines) {
          const request = JSON.parse(line) as { execute: string; id: number };
          if (request.execute === 'query-status') {
            connection.write('this is not JSON\r\n');
            connection.write('{"unexpected": true}\r\n');
            connection.write('{"return": {}, "id": 999}\r\n');
            connection.write('{"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 2}}\r\n');
            connection.write(
              JSON.stringify({ return: { status: 'running', running: true }, id: request.id }),
            );
            connection.write('\r\n');
          } else {
            connection.write(`${JSON.stringify({ return: {}, id: request.id })}\r\n`);
          }
        }
      });
    });
    fakePeer.listen(socket);
    await once(fakePeer, 'listening');
    const logLines: string[] = [];
    const logger = pino(
      { level: 'warn' },
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          logLines.push(chunk.toString());
          done();
        },
      }),
    );
    const client = await QmpClient.connect(socket, { logger });
    try {
      const resumed = client.waitForEvent('RESUME');
      expect(await client.execute('query-status')).toEqual({ status: 'running', running: true });
      expect((await resumed).timestamp).toEqual({ seconds: 1, microseconds: 2 });
      expect(client.closed).toBe(false);
      const messages = logLines.map((line) => (JSON.parse(line) as { msg: string; line?: string }).msg);
      expect(messages).toEqual([
        'skipping a QMP line that is not JSON',
        'skipping an unexpected QMP message',
        'skipping a QMP reply no command waits for',
      ]);
    } finally {
      await client.close();
      fakePeer.close();
    }
  });
});
