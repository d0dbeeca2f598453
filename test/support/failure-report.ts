// What a suite's namespaces held when one of its tests failed, printed into the test log. A test
// that times out says only where it was; a rare failure in CI must be explainable from its log
// alone (issue 37), so the bed prints the VMs, operations, pods and Events of the suite, each
// runner's last words and what the managers and the bed's processes logged about the namespaces.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';

const run = promisify(execFile);
const LINES = 40;

const tail = (text: string, lines = LINES) => text.trimEnd().split('\n').slice(-lines).join('\n');

/** One section of the report; a part that cannot be read says why instead. */
async function section(title: string, read: () => Promise<string>): Promise<string> {
  const body = await read().catch((err: Error) => `(not readable: ${err.message.split('\n')[0]})`);
  return `--- ${title}\n${body.trimEnd() || '(none)'}`;
}

export interface FailureReportInput {
  kubeconfig: string;
  namespaces: string[];
  /** Log files (the managers', the bed's, kubelet's, …), searched for lines about the namespaces. */
  logs?: string[];
  /**
   * The work queue's keys (`vmop queue ls`), where the bed can read it: a key held by a handler
   * that never ends, or left failing, shows there, not in any object.
   */
  queue?: () => Promise<string>;
}

export async function failureReport(input: FailureReportInput): Promise<string> {
  const kubectl = async (...args: string[]) =>
    (await run('kubectl', ['--kubeconfig', input.kubeconfig, ...args], { maxBuffer: 16 * 1024 * 1024 }))
      .stdout;
  const parts: string[] = [];
  for (const namespace of input.namespaces) {
    const inNs = (...args: string[]) => kubectl('-n', namespace, ...args);
    parts.push(
      await section(`${namespace}: VMs, operations, pods, claims`, () =>
        inNs('get', 'vm,vmop,pods,pvc', '-o', 'wide'),
      ),
      await section(`${namespace}: VM status`, () =>
        inNs('get', 'vm', '-o', 'jsonpath={range .items[*]}{.metadata.name}: {.status}{"\\n"}{end}'),
      ),
      await section(`${namespace}: Events, newest last`, async () =>
        tail(await inNs('get', 'events', '--sort-by=.lastTimestamp')),
      ),
    );
    // Each pod with its containers' restart counts, in one call.
    const pods = (
      await inNs(
        'get',
        'pods',
        '-o',
        'jsonpath={range .items[*]}{.metadata.name}{" "}{.status.containerStatuses[*].restartCount}{"\\n"}{end}',
      ).catch(() => '')
    )
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const [name, ...restarts] = line.split(' ');
        return { pod: `pod/${name}`, restarted: restarts.some((count) => Number(count) > 0) };
      });
    for (const { pod, restarted } of pods) {
      parts.push(
        await section(`${namespace}: ${pod}, the end of its log`, () =>
          inNs('logs', pod, '--all-containers', '--tail', String(LINES)),
        ),
      );
      // A restarted runner's last words are its previous container's (run41: qemu got a signal,
      // and only the new container's log was printed).
      if (restarted)
        parts.push(
          await section(`${namespace}: ${pod}, the end of its previous container's log`, () =>
            inNs('logs', pod, '--all-containers', '--previous', '--tail', String(LINES * 2)),
          ),
        );
    }
  }
  if (input.queue)
    parts.push(
      await section(`the work queue, its keys of ${input.namespaces.join(', ')}`, async () => {
        const [header, ...rows] = (await input.queue!()).split('\n');
        const ours = rows.filter((row) => input.namespaces.some((ns) => row.includes(`:${ns}/`)));
        return ours.length > 0 ? [header, ...ours].join('\n') : '';
      }),
    );
  for (const log of input.logs ?? []) {
    parts.push(
      await section(`${log}, its lines about ${input.namespaces.join(', ')}`, async () => {
        const lines = (await readFile(log, 'utf8'))
          .split('\n')
          .filter((line) =>
            input.namespaces.some((ns) => line.includes(`"${ns}"`) || line.includes(`${ns}/`)),
          );
        return lines.slice(-LINES).join('\n');
      }),
    );
  }
  return parts.join('\n');
}
