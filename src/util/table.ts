// Plain-text tables and durations for the CLI and the benchmarks, kubectl style.

/** Left-aligned columns separated by two spaces, like kubectl. */
export function renderTable(headers: string[], rows: string[][]): string {
  const widths = headers.map((header, i) =>
    Math.max(header.length, ...rows.map((row) => (row[i] ?? '').length)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** `3s`, `4m10s`, `2h5m`, `3d4h`: coarse enough to read at a glance. */
export function formatDuration(ms: number): string {
  const seconds = Math.round(Math.abs(ms) / 1000);
  const minutes = Math.floor(seconds / 60);
  const hours = Math.floor(minutes / 60);
  const days = Math.floor(hours / 24);
  if (seconds < 60) return `${seconds}s`;
  if (minutes < 60) return withRest(`${minutes}m`, seconds % 60, 's');
  if (hours < 24) return withRest(`${hours}h`, minutes % 60, 'm');
  return withRest(`${days}d`, hours % 24, 'h');
}

function withRest(major: string, rest: number, unit: string): string {
  return rest === 0 ? major : `${major}${rest}${unit}`;
}
