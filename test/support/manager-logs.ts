// Reading manager logs (pino JSON lines) the way an operator would: who reconciled what, when,
// and when a replica started. Takeover tests use it to show which replica did the work.
export interface ManagerLogLine {
  time: number;
  pid: number;
  msg: string;
  key?: string;
  writes?: string[];
}

export function parseManagerLog(text: string): ManagerLogLine[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as ManagerLogLine);
}

/** When the replica first wrote `write` (e.g. 'ConfigMap') for `key` after `since`, if it did. */
export function firstWrite(lines: ManagerLogLine[], key: string, write: string, since: number) {
  return lines.find(
    (line) =>
      line.msg === 'reconciled' &&
      line.key === key &&
      line.time > since &&
      line.writes?.some((w) => w.startsWith(write)),
  )?.time;
}

/** When a replica (re)started after `since`: its 'manager started' line. */
export function startedAfter(lines: ManagerLogLine[], since: number) {
  return lines.find((line) => line.msg === 'manager started' && line.time > since)?.time;
}
