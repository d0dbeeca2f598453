import {
  parseRunnerConfig,
  type RunnerConfig,
  type RunnerConfigInput,
} from '../../../src/api/runner-config.js';

/** A config through the real parser (defaults applied), as the runner would read it from its file. */
export function runnerConfig(settings: RunnerConfigInput['/Runner']): RunnerConfig {
  const result = parseRunnerConfig(JSON.stringify({ '/Runner': settings }));
  if (!result.ok) throw new Error(result.errors.join('\n'));
  return result.config;
}
