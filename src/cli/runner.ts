import { Command, InvalidArgumentError, Option } from 'commander';
import { z } from 'zod';
import { SNAPSHOT_SUFFIX_ENV } from '../api/runner-snapshot.js';
import { workKeyNamespace } from '../api/tenant-redis.js';
import { WorkKeySchema } from '../queue/index.js';
import { createLogger } from '../util/logger.js';
import { logPublisher, redisPublisher } from '../runner/publish.js';
import { EXIT_BAD_CONFIG, VmRunner } from '../runner/runner.js';
import { relaySerialConsole } from '../console/serial-relay.js';
import { openRedis } from '../queue/connection.js';
import { watchRunnerRequests } from '../runner/migration/request-channel.js';
import type { MigrationRequest } from '../runner/migration/request.js';
import { vmUsageRegistry } from '../runner/metrics/registry.js';
import { usageRecord } from '../runner/metrics/usage.js';
import { USAGE_SAMPLE_SECONDS } from '../api/vm-usage-history.js';
import { serveHttpEndpoints } from '../util/http-endpoints.js';

const Port = z.coerce.number().int().min(0).max(65535);

function parsePort(value: string): number {
  const parsed = Port.safeParse(value);
  if (!parsed.success) throw new InvalidArgumentError(`${JSON.stringify(value)} is no port (0 to 65535)`);
  return parsed.data;
}

export const DEFAULT_CONFIG_PATH = '/etc/opt/vmrunner/config.yaml';

interface RunnerCliOptions {
  config: string;
  redis?: string;
  vmKey?: string;
  snapshotSuffix?: string;
  pod?: string;
  podUid?: string;
  podIp?: string;
  podInfo?: string;
  migrationKeys?: string;
  metricsPort?: number;
  node?: string;
}

async function runRunner(options: RunnerCliOptions): Promise<number> {
  const logger = createLogger('runner');
  if (
    options.redis &&
    !(WorkKeySchema.safeParse(options.vmKey).success && workKeyNamespace(options.vmKey!))
  ) {
    logger.error(
      `publishing to Redis needs the VM key (--vm-key or VMOP_VM_KEY) like vm:ns/name, not ${JSON.stringify(options.vmKey)}`,
    );
    return EXIT_BAD_CONFIG;
  }
  const publisher =
    options.redis && options.vmKey
      ? redisPublisher({
          redisUrl: options.redis,
          vmKey: options.vmKey,
          snapshotSuffix: options.snapshotSuffix,
          logger,
        })
      : logPublisher(logger);
  const runner = new VmRunner({
    configPath: options.config,
    publish: publisher.publish,
    logger,
    pod: options.pod,
    podUid: options.podUid,
    ...(options.podIp && { podIP: options.podIp }),
    ...(options.podInfo && { migration: { podInfoFile: options.podInfo } }),
    ...(options.redis &&
      options.podUid && {
        watchRequests: (onRequest: (request: MigrationRequest) => void) =>
          watchRunnerRequests({
            redis: openRedis(options.redis!),
            namespace: workKeyNamespace(options.vmKey!)!,
            podUid: options.podUid!,
            logger,
            onRequest,
          }),
      }),
    ...(options.migrationKeys && { keysDir: options.migrationKeys }),
  });
  const metrics =
    options.metricsPort !== undefined
      ? await serveHttpEndpoints(
          options.metricsPort,
          '::',
          vmUsageRegistry(
            {
              namespace: (options.vmKey && workKeyNamespace(options.vmKey)) || '',
              name: options.vmKey?.split('/')[1] ?? '',
              node: options.node ?? '',
            },
            () => runner.usage(),
          ),
          () => runner.servesGuest(),
        )
      : undefined;
  // The last hour of what the VM uses, for the GUI's VM page (kept in Redis, where there is one).
  const history =
    options.redis &&
    setInterval(() => {
      void runner.usage().then(
        (usage) => usage && publisher.recordUsage(usageRecord(usage)),
        () => undefined,
      );
    }, USAGE_SAMPLE_SECONDS * 1000);
  const stop = (signal: NodeJS.Signals) => {
    logger.info({ signal }, 'stop requested');
    runner.requestStop();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  const code = await runner.run();
  clearInterval(history);
  await metrics?.close();
  await publisher.close();
  return code;
}

export function register(program: Command): void {
  program
    .command('runner')
    .description('Run one QEMU VM as described by a runner config file (in a pod, or stand-alone)')
    .option('-c, --config <path>', 'the runner config file', DEFAULT_CONFIG_PATH)
    .addOption(new Option('--redis <url>', 'publish VM state to this Redis').env('VMOP_REDIS_URL'))
    .addOption(
      new Option('--vm-key <key>', 'the VM key to publish under, e.g. vm:ns/name').env('VMOP_VM_KEY'),
    )
    .addOption(new Option('--pod <name>', 'the pod the runner runs in').env('VMOP_POD_NAME'))
    .addOption(
      new Option('--pod-uid <uid>', "the pod's uid (tells pod incarnations apart)").env('VMOP_POD_UID'),
    )
    .addOption(
      new Option(
        '--pod-ip <address>',
        "the pod's address (a migration's source reaches its target there)",
      ).env('VMOP_POD_IP'),
    )
    .addOption(
      new Option('--pod-info <file>', "the pod's annotations (downward API): live migration requests").env(
        'VMOP_POD_INFO',
      ),
    )
    .addOption(
      new Option(
        '--migration-keys <dir>',
        "where the VM's key file appears (live migration, attached disks)",
      ).env('VMOP_MIGRATION_KEYS'),
    )
    .addOption(
      new Option('--metrics-port <port>', "serve the VM's metrics for Prometheus on this port (/metrics)")
        .env('VMOP_METRICS_PORT')
        .argParser(parsePort),
    )
    .addOption(
      new Option('--node <name>', 'the node the runner runs on (a label of its metrics)').env(
        'VMOP_NODE_NAME',
      ),
    )
    .addOption(
      new Option('--snapshot-suffix <suffix>', "a migration target's own snapshot key").env(
        SNAPSHOT_SUFFIX_ENV,
      ),
    )
    .action(async (options: RunnerCliOptions) => {
      process.exit(await runRunner(options));
    });

  // Inside a runner pod, for `vmop vm console` (through the exec API): not for people.
  program
    .command('serial-console', { hidden: true })
    .description("Relay the terminal to this runner's VM serial console (what `vmop vm console` runs)")
    .option('-c, --config <path>', 'the runner config file', DEFAULT_CONFIG_PATH)
    .option('--ask-first', 'take the console only once the client answers go on stdin (relay-go.ts)')
    .action(async (options: { config: string; askFirst?: boolean }) => {
      process.exit(await relaySerialConsole(options.config, { askFirst: options.askFirst === true }));
    });
}
