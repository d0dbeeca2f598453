import { Command, InvalidArgumentError, Option } from 'commander';
import { z } from 'zod';
import { assertRedisReachable, RedisUrlSchema } from '../queue/connection.js';
import { DEFAULT_QUEUE_NAME, WorkKeySchema } from '../queue/keys.js';
import { formatKeyDetail, formatKeyRows, formatStats } from '../queue/inspect/format.js';
import { QueueInspector } from '../queue/inspect/inspector.js';
import { KEY_STATES, KeyStateNameSchema, type KeyStateName } from '../queue/inspect/key-rows.js';

const QueueCliOptionsSchema = z.object({
  redis: z
    .string({ error: 'set REDIS_URL or pass --redis <url>' })
    .min(1, 'set REDIS_URL or pass --redis <url>')
    .pipe(RedisUrlSchema),
  queue: z.string().min(1),
  output: z.enum(['table', 'json']),
});
type QueueCliOptions = z.infer<typeof QueueCliOptionsSchema>;

/** Runs `work` against the queue named by the command's (global) options, then closes the connections. */
async function withInspector(
  command: Command,
  work: (inspector: QueueInspector, options: QueueCliOptions) => Promise<void>,
): Promise<void> {
  const parsed = QueueCliOptionsSchema.safeParse(command.optsWithGlobals());
  if (!parsed.success) {
    command.error(`vmop queue: ${parsed.error.issues.map((issue) => issue.message).join('; ')}`);
  }
  const options = parsed.data;
  await assertRedisReachable(options.redis).catch((err: Error) =>
    command.error(`vmop queue: ${err.message}`),
  );
  const inspector = new QueueInspector({ redisUrl: options.redis, queueName: options.queue });
  try {
    await work(inspector, options);
  } finally {
    await inspector.close();
  }
}

function print(options: QueueCliOptions, value: unknown, table: () => string): void {
  console.log(options.output === 'json' ? JSON.stringify(value, null, 2) : table());
}

function parseStates(value: string, previous: KeyStateName[] = []): KeyStateName[] {
  return [
    ...previous,
    ...value.split(',').map((state) => {
      const parsed = KeyStateNameSchema.safeParse(state.trim());
      if (!parsed.success) throw new InvalidArgumentError(`states are ${KEY_STATES.join(', ')}`);
      return parsed.data;
    }),
  ];
}

function parseKey(value: string): string {
  const parsed = WorkKeySchema.safeParse(value);
  if (!parsed.success) throw new InvalidArgumentError(parsed.error.issues[0]!.message);
  return parsed.data;
}

export function register(program: Command): void {
  const queue = program
    .command('queue')
    .description('Inspect and steer the work queue: what is queued, running, due again or failing, and why')
    .addOption(new Option('--redis <url>', 'the Redis that holds the queue').env('REDIS_URL'))
    .option('--queue <name>', 'the queue name', DEFAULT_QUEUE_NAME)
    .addOption(
      new Option('-o, --output <format>', 'output format').choices(['table', 'json']).default('table'),
    );

  queue
    .command('stats')
    .description('Keys by state, throughput over the last minute, age of the oldest waiting key')
    .action(async (_options, command: Command) => {
      await withInspector(command, async (inspector, options) => {
        const stats = await inspector.stats();
        print(options, stats, () => formatStats(stats, Date.now()));
      });
    });

  queue
    .command('ls')
    .description('Keys that are queued, running, due again or failing')
    .option('--state <states>', `only these states (comma-separated: ${KEY_STATES.join(', ')})`, parseStates)
    .action(async (flags: { state?: KeyStateName[] }, command: Command) => {
      await withInspector(command, async (inspector, options) => {
        const rows = await inspector.list(flags.state);
        print(options, rows, () => formatKeyRows(rows, Date.now()));
      });
    });

  queue
    .command('show')
    .description('One key: attempts, last error, and the events its recent jobs carried')
    .argument('<key>', 'a work key, e.g. vm:default/test', parseKey)
    .action(async (key: string, _flags, command: Command) => {
      await withInspector(command, async (inspector, options) => {
        const detail = await inspector.show(key);
        print(options, detail, () => formatKeyDetail(detail, Date.now()));
      });
    });

  queue
    .command('retry')
    .description('Run keys now (their failure records stay until a run succeeds)')
    .argument('[keys...]', 'work keys to run now', (value, previous: string[] = []) => [
      ...previous,
      parseKey(value),
    ])
    .option('--failed', 'every failing key')
    .action(async (keys: string[], flags: { failed?: boolean }, command: Command) => {
      if (!flags.failed && keys.length === 0) command.error('vmop queue retry: name keys or pass --failed');
      await withInspector(command, async (inspector, options) => {
        const retried = flags.failed ? await inspector.retryFailed() : await inspector.retry(keys);
        print(options, { retried }, () =>
          retried.length === 0 ? 'No failing keys.' : `Queued again:\n${retried.join('\n')}`,
        );
      });
    });

  const pauseCommands = [
    {
      name: 'pause',
      paused: true,
      description: 'Stop all workers (every replica) from taking keys; adds keep queueing',
    },
    { name: 'resume', paused: false, description: 'Let workers take keys again' },
  ];
  for (const { name, paused, description } of pauseCommands) {
    queue
      .command(name)
      .description(description)
      .action(async (_options, command: Command) => {
        await withInspector(command, async (inspector, options) => {
          await (paused ? inspector.pause() : inspector.resume());
          print(options, { paused }, () => `Queue ${inspector.queueName} ${paused ? 'paused' : 'resumed'}.`);
        });
      });
  }

  queue
    .command('dashboard')
    .description('Serve bull-board over the queue until interrupted (read-only unless --allow-retries)')
    .option(
      '--port <port>',
      'TCP port',
      (value) => z.coerce.number().int().min(0).max(65535).parse(value),
      3000,
    )
    .option('--host <address>', 'address to listen on (the board has no authentication)', '127.0.0.1')
    .option('--allow-retries', 'allow retrying failed keys from the board')
    .action(async (flags: { port: number; host: string; allowRetries?: boolean }, command: Command) => {
      await withInspector(command, async (inspector) => {
        // Loaded on demand: express and bull-board would slow every other vmop command's start.
        const { startDashboard } = await import('../queue/inspect/dashboard.js');
        const dashboard = await startDashboard({
          inspector,
          port: flags.port,
          host: flags.host,
          allowRetries: flags.allowRetries ?? false,
        });
        console.log(`Dashboard for queue ${inspector.queueName}: ${dashboard.url}`);
        await new Promise<void>((resolve) => {
          process.once('SIGINT', resolve);
          process.once('SIGTERM', resolve);
        });
        await dashboard.close();
      });
    });
}
