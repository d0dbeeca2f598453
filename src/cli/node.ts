import { Command } from 'commander';
import { formatFieldPath } from '../api/runner-config.js';
import { startNodeAgent } from '../node/agent.js';
import { NodeAgentOptions } from '../node/options.js';

const collect = (value: string, previous: string[]) => [...previous, ...value.split(',').filter(Boolean)];
const collectRaw = (value: string, previous: string[]) => [...previous, value];

/** KEY=VALUE pairs, or the first one that is not. */
function parseAssignments(pairs: string[]): Record<string, string> | string {
  const malformed = pairs.find((pair) => pair.indexOf('=') <= 0);
  if (malformed !== undefined) return malformed;
  return Object.fromEntries(
    pairs.map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
}

export function register(program: Command): void {
  program
    .command('node')
    .description(
      'Run a local node agent: register a Node and run the runner pods bound to it as local processes',
    )
    .option('--kubeconfig <path>', 'kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)')
    .option('--name <node>', 'the Node name (default: the hostname)')
    .requiredOption('--state-dir <dir>', 'where pod directories and provisioned volumes live')
    .option('--runner-env <KEY=VALUE>', 'an environment default for runners (repeatable)', collectRaw, [])
    .option('--image-repository <dir>', 'the image repository runners use (sets VMOP_IMAGE_REPOSITORY)')
    .option(
      '-n, --namespace <name>',
      'only pods in this namespace (repeatable, comma-separated; default: all)',
      collect,
      [],
    )
    .option(
      '--restart-backoff <seconds>',
      'first delay before restarting an exited runner (doubles)',
      Number,
      10,
    )
    .option('--restart-backoff-cap <seconds>', 'longest delay before restarting an exited runner', Number, 60)
    .option(
      '--lease-duration <seconds>',
      "the node Lease's duration (renewed every quarter of it)",
      Number,
      40,
    )
    .option('--shutdown-grace <seconds>', 'how long runners get to stop when the agent stops', Number, 30)
    .action(async (flags) => {
      const runnerEnv = parseAssignments(flags.runnerEnv);
      if (typeof runnerEnv === 'string') {
        console.error(`vmop node: --runner-env ${runnerEnv}: expected KEY=VALUE`);
        process.exit(2);
      }
      if (flags.imageRepository) runnerEnv.VMOP_IMAGE_REPOSITORY = flags.imageRepository;
      const parsed = NodeAgentOptions.safeParse({
        kubeconfig: flags.kubeconfig,
        nodeName: flags.name,
        stateDir: flags.stateDir,
        runnerEnv,
        namespaces: flags.namespace,
        restartBackoff: { baseMs: flags.restartBackoff * 1000, capMs: flags.restartBackoffCap * 1000 },
        leaseDurationSeconds: flags.leaseDuration,
        shutdownGraceSeconds: flags.shutdownGrace,
      });
      if (!parsed.success) {
        for (const issue of parsed.error.issues)
          console.error(`vmop node: ${formatFieldPath(issue.path)}: ${issue.message}`);
        process.exit(2);
      }
      const agent = await startNodeAgent(parsed.data);
      const shutdown = () => void agent.stop().then(() => process.exit(0));
      process.once('SIGTERM', shutdown);
      process.once('SIGINT', shutdown);
    });
}
