// How a command that was typed right says it failed: one line on stderr and exit code 1. Commander's
// command.error() also prints the usage text (showHelpAfterError), which says "typed wrong" to a
// user whose operation was refused.

/** A failure to report in one line (not a usage error). */
export class CliFailure extends Error {}

export function fail(message: string): never {
  throw new CliFailure(message);
}

/** Ends the command with `message` on stderr and exit code 1, without the usage text. */
export function reportFailure(message: string): void {
  process.stderr.write(`${message}\n`);
  process.exitCode = 1;
}
