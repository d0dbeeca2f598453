import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { GO, RELAY_ASKS, answerRelay, clientSaysGo } from '../../../src/console/relay-go.js';

/** Everything written to `stream` so far. */
const drained = (stream: PassThrough) => String(stream.read() ?? '');
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe("the serial relay's go", () => {
  it('a client still there answers go, then passes the keys typed meanwhile; errors before the question pass on', async () => {
    const [keys, errors] = [new PassThrough(), new PassThrough()];
    const { toRelay, relayErrors } = answerRelay({ keys, errors, stillWanted: () => true });
    keys.write('typed early');
    relayErrors.write('vmop: a warning\n');
    // The question may come in pieces.
    relayErrors.write(RELAY_ASKS.slice(0, 5));
    await settle();
    expect(drained(toRelay)).toBe('');
    relayErrors.write(RELAY_ASKS.slice(5) + 'vmop: later\n');
    await settle();
    expect(drained(toRelay)).toBe(`${String.fromCharCode(GO)}typed early`);
    expect(drained(errors)).toBe('vmop: a warning\nvmop: later\n');
  });

  it("a client that no longer wants the console ends the relay's stdin without go", async () => {
    const [keys, errors] = [new PassThrough(), new PassThrough()];
    const { toRelay, relayErrors } = answerRelay({ keys, errors, stillWanted: async () => false });
    keys.write('never sent');
    relayErrors.write(RELAY_ASKS);
    const ended = new Promise((resolve) => toRelay.once('end', resolve));
    toRelay.resume();
    await ended;
    expect(drained(errors)).toBe('');
  });

  it('the relay goes on go with the bytes after it, and not on an ended stdin or another answer', async () => {
    const go = new PassThrough();
    const answer = clientSaysGo(go);
    go.write(Buffer.from([GO, 0x61, 0x62]));
    expect(String(await answer)).toBe('ab');
    const gone = new PassThrough();
    const none = clientSaysGo(gone);
    gone.end();
    expect(await none).toBeUndefined();
    const other = new PassThrough();
    const wrong = clientSaysGo(other);
    other.write('x');
    expect(await wrong).toBeUndefined();
  });
});
