// The serial relay asks its client before it takes the console. Started through the exec API, a
// relay may start seconds after its client asked for it (a busy node), and by then the client may
// be gone (a page closed at once) or another session may have opened since: a relay that connected
// to the hub then would take the console from that newer session (issue 52, run2). So the relay
// asks on stderr and connects only when the client answers "go" as the first byte of its stdin;
// a client that is gone has closed that stdin (the exec is not a TTY, so its end reaches the relay).
import { PassThrough, Writable, type Readable } from 'node:stream';

/** What the relay writes on stderr when it is ready to take the console. */
export const RELAY_ASKS = '\u0005vmop-serial-console: go?\n';
/** The client's answer: the first byte of the relay's stdin. */
export const GO = 0x06;

/**
 * The relay's side: waits for the client's answer on `stdin`. The bytes that came after "go"
 * (keys typed meanwhile), or undefined when the client is gone (its stdin ended) or answered
 * something else; `stdin` is paused either way, for the caller to pipe on.
 */
export function clientSaysGo(stdin: Readable): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const answer = (rest: Buffer | undefined) => {
      stdin.off('data', onData);
      stdin.off('end', onEnd);
      stdin.pause();
      resolve(rest);
    };
    const onData = (chunk: Buffer) => answer(chunk[0] === GO ? chunk.subarray(1) : undefined);
    const onEnd = () => answer(undefined);
    stdin.on('data', onData);
    stdin.once('end', onEnd);
  });
}

/**
 * The client's side, around an exec of the relay: `toRelay` is the exec's stdin and `relayErrors`
 * its stderr. When the relay asks, `stillWanted` decides: yes sends "go" and then the keys, no ends
 * the relay's stdin (the relay exits without touching the console). Whatever else the relay writes on
 * stderr (its errors) goes to `errors`.
 */
export function answerRelay(options: {
  keys: Readable;
  errors: Writable;
  stillWanted: () => boolean | Promise<boolean>;
}): { toRelay: PassThrough; relayErrors: Writable } {
  const toRelay = new PassThrough();
  let pending = '';
  let asked = false;
  const relayErrors = new Writable({
    write(chunk: Buffer, _encoding, done) {
      if (asked) return void options.errors.write(chunk, () => done());
      pending += String(chunk);
      let passOn = '';
      // Line by line until the question: what the relay says before it (warnings) passes on.
      for (let newline = pending.indexOf('\n'); newline >= 0 && !asked; newline = pending.indexOf('\n')) {
        const line = pending.slice(0, newline + 1);
        pending = pending.slice(newline + 1);
        if (line.endsWith(RELAY_ASKS)) {
          passOn += line.slice(0, -RELAY_ASKS.length);
          asked = true;
          void decide();
        } else passOn += line;
      }
      if (asked || !RELAY_ASKS.startsWith(pending.slice(0, RELAY_ASKS.length))) {
        passOn += pending;
        pending = '';
      }
      if (passOn === '') return done();
      options.errors.write(passOn, () => done());
    },
  });
  const decide = async () => {
    const wanted = await Promise.resolve()
      .then(options.stillWanted)
      .catch(() => false);
    if (!wanted) return void toRelay.end();
    toRelay.write(Buffer.of(GO));
    options.keys.pipe(toRelay);
  };
  return { toRelay, relayErrors };
}
