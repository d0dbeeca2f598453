// An option that may be given many times (`--deny A --deny B`): its values, in order; none by default.
import { Option } from 'commander';

export const repeatable = (flags: string, description: string): Option =>
  new Option(flags, description)
    .argParser((value: string, previous: string[]) => [...previous, value])
    .default([]);
