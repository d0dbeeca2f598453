// How the CLI follows an object it made until it ends: its status polled every half second.
import { setTimeout as sleep } from 'node:timers/promises';
import { formatDuration } from '../util/table.js';
import { fail } from './failure.js';

type WithStatus = { status?: { phase?: string; message?: string } };

/**
 * Polls `read` until `done` and returns what it read last; fails, naming `name`, after `timeoutMs`.
 * With `narrate`, each new status message goes to stderr meanwhile.
 */
export async function pollUntil<T extends WithStatus>(
  name: string,
  read: () => Promise<T>,
  done: (object: T) => boolean,
  timeoutMs: number,
  options: { narrate?: boolean } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let said = '';
  for (;;) {
    const object = await read();
    if (done(object)) return object;
    const { phase = 'Pending', message = '' } = object.status ?? {};
    if (options.narrate && message && message !== said) console.error(`${name}: ${phase}: ${message}`);
    said = message;
    if (Date.now() > deadline)
      fail(`${name}: still ${phase} after ${formatDuration(timeoutMs)}${message ? ` (${message})` : ''}`);
    await sleep(500);
  }
}

/** `name: Phase (message)`, what a failure says. */
export const phaseAndMessage = (name: string, object: WithStatus) => {
  const { phase = 'Pending', message } = object.status ?? {};
  return `${name}: ${phase}${message ? ` (${message})` : ''}`;
};
