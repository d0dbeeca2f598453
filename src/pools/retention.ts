// How long a pool keeps a VM for the user it is assigned to: VmPool.spec.retention, an ISO 8601
// duration counted from the assignment's lastUsed, or an ISO 8601 time. Pure.

const DURATION =
  /^P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)[Hh])?(?:(\d+)[Mm])?(?:(\d+(?:\.\d{1,9})?)[Ss])?)?$/;

/** The end of an assignment last used at `lastUsed`; years and months are calendar ones (UTC). */
export function retainedUntil(retention: string, lastUsed: Date): Date {
  const match = DURATION.exec(retention);
  if (!match) {
    const until = new Date(retention);
    if (Number.isNaN(until.getTime())) throw new Error(`not an ISO 8601 duration or time: ${retention}`);
    return until;
  }
  const [years, months, weeks, days, hours, minutes] = match.slice(1, 7).map((part) => Number(part ?? 0));
  const seconds = Number(match[7] ?? 0);
  const until = new Date(lastUsed);
  until.setUTCFullYear(until.getUTCFullYear() + years!, until.getUTCMonth() + months!);
  const rest = (((weeks! * 7 + days!) * 24 + hours!) * 60 + minutes!) * 60 + seconds;
  return new Date(until.getTime() + Math.round(rest * 1000));
}
