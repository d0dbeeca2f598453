import { Command, InvalidArgumentError, Option } from 'commander';
import { repeatable } from './repeatable.js';

/** A flag's value as a JSON object, or a clear error naming the expected form. */
function jsonObject(value: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    parsed = undefined;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new InvalidArgumentError('a JSON object, e.g. {"team":"a"}');
  }
  return parsed as Record<string, unknown>;
}
import {
  DEFAULT_RUNNER_IMAGE,
  ManagerOptions,
  startManager,
  type RunningManager,
} from '../operator/manager.js';
import { formatFieldPath } from '../api/runner-config.js';

const STOP_TIMEOUT_MS = 10_000;

const collect = (value: string, previous: string[]) => [...previous, ...value.split(',').filter(Boolean)];

export function register(program: Command): void {
  program
    .command('manager')
    .description('Run the operator: watch VirtualMachines and reconcile them from the shared work queue')
    .option('--kubeconfig <path>', 'kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)')
    .option(
      '-n, --namespace <name>',
      'watch this namespace (repeatable, comma-separated; default: all)',
      collect,
      [],
    )
    .addOption(
      new Option('--redis <url>', 'Redis URL of the work queue').env('REDIS_URL').makeOptionMandatory(),
    )
    .option('--concurrency <n>', 'keys reconciled at once by this replica', Number, 16)
    .option(
      '--rate-limit <per-second>',
      'reconciles per second across all replicas (default: unlimited)',
      Number,
    )
    .option(
      '--metrics-port <port>',
      'port of /metrics, /healthz and /readyz (0: any free port)',
      Number,
      8080,
    )
    .option('--runner-image <image>', 'runner image for VMs that do not name one', DEFAULT_RUNNER_IMAGE)
    .option('--runner-image-pull-policy <policy>', 'Always, IfNotPresent or Never (default: by the tag)')
    .option(
      '--no-kvm',
      "runner pods do not ask for /dev/kvm (vmop's node agent gives it); QEMU emulates (TCG), for nodes without KVM",
    )
    .addOption(
      repeatable(
        '--host-network-namespace <namespace>',
        'a namespace whose VMs may have host-bridge tap networks (their runner runs privileged on the node network); repeatable',
      ),
    )
    .option(
      '--allow-display-without-password',
      'let VMs run a SPICE display without a password (generateSecret: false and no Secret), open to whoever reaches the runner pod',
    )
    .addOption(
      repeatable(
        '--import-deny <network>',
        'a network, address or address:port disk imports may not fetch from, besides the nodes, the apiserver, loopback and link-local; repeatable',
      ),
    )
    .addOption(
      repeatable(
        '--import-allow <network>',
        'a network, address or address:port disk imports may fetch from even so; repeatable',
      ),
    )
    .addOption(
      repeatable(
        '--allowed-runner-image <image>',
        'a runner image VMs may name in spec.image besides the default (exact, or a prefix ending in *); repeatable',
      ),
    )
    .addOption(
      new Option(
        '--runner-redis-url <url>',
        "Redis URL runners publish to, with the runner's credential (default: --redis)",
      ).env('VMOP_RUNNER_REDIS_URL'),
    )
    .option(
      '--runner-data-storage-class <name>',
      "StorageClass of a VM's runner data claim (default: the cluster's default)",
    )
    .option(
      '--runner-data-access-mode <mode>',
      'ReadWriteOnce, or ReadWriteMany (shared storage: lets VMs migrate live)',
      'ReadWriteOnce',
    )
    .option(
      '--eviction-strategy <strategy>',
      'LiveMigrate, LiveMigrateIfPossible or None: what an eviction does to a VM that names none',
      'LiveMigrateIfPossible',
    )
    .option(
      '--runner-update <method>',
      'LiveMigrate, LiveMigrateOrRestart or None: what a new --runner-image does to running VMs on the old one',
      'LiveMigrate',
    )
    .option('--parallel-migrations <n>', 'live migrations at once in the cluster', Number, 5)
    .option(
      '--parallel-outbound-migrations-per-node <n>',
      'live migrations at once out of one node',
      Number,
      2,
    )
    .addOption(
      repeatable(
        '--vm-cidr <subnet>',
        'a subnet VMs get addresses of their own from (VirtualMachineIPAddress), e.g. 10.66.10.0/24; repeatable',
      ),
    )
    .option(
      '--ip-address-hold <seconds>',
      "how long a deleted VM's address stays with its namespace",
      Number,
      600,
    )
    .option('--cpu-overcommit <factor>', 'a VM pod requests its CPUs divided by this', Number, 2)
    .option('--ram-overcommit <factor>', 'a VM pod requests its RAM divided by this', Number, 1.25)
    .addOption(
      new Option(
        '--no-config-nudge',
        "leave config volume refreshes to kubelet's sync (benchmarks)",
      ).hideHelp(),
    )
    .option('--load-balancer-service', 'a LoadBalancer Service for the SPICE port of every VM')
    .option('--load-balancer-service-labels <json>', "the Services' labels (a JSON object)", jsonObject)
    .option(
      '--load-balancer-service-annotations <json>',
      "the Services' annotations (a JSON object)",
      jsonObject,
    )
    .option(
      '--runner-network-policy',
      "a NetworkPolicy for each VM's runner pods: vmop's listeners only for the VM's own pods and the peers below, the guest's ports as a pod's",
    )
    .option(
      '--runner-ingress-from <json>',
      'a NetworkPolicy peer (JSON) that reaches every listener of runner pods: the managers; repeatable',
      (value: string, previous: unknown[]) => [...previous, jsonObject(value)],
      [],
    )
    .option(
      '--runner-metrics-from <json>',
      "a NetworkPolicy peer (JSON) that reaches the runners' metrics port: Prometheus; repeatable",
      (value: string, previous: unknown[]) => [...previous, jsonObject(value)],
      [],
    )
    .option('--resync-interval <seconds>', 'how often all VMs are reconciled anyway', Number, 600)
    .option('--web-port <port>', 'serve the web GUI on this port (0: any free port; default: no GUI)', Number)
    .option('--web-host <address>', 'address the web GUI listens on', '0.0.0.0')
    .option(
      '--web-public-url <url>',
      'where people reach the web GUI (the login returns to <url>/auth/callback)',
    )
    .option(
      '--web-allow-plain-http',
      'serve a plain http public URL (not loopback) with cookies that are not Secure: only where something else encrypts the way',
    )
    .option(
      '--web-logins-per-minute <n>',
      'requests to /auth/ (no login needed) per minute and client address, per replica',
      Number,
      120,
    )
    .option(
      '--web-logins-per-person-per-minute <n>',
      'logins one person may finish per minute, per replica',
      Number,
      10,
    )
    .addOption(
      repeatable(
        '--web-trusted-proxy <address>',
        "a proxy in front of the GUI (address or subnet): the client's address comes from its X-Forwarded-For",
      ),
    )
    .option('--oidc-issuer <url>', 'the OpenID Connect provider people log in at')
    .option('--oidc-client-id <id>', "the GUI's client id at the provider")
    .addOption(
      new Option('--oidc-client-secret <secret>', "the GUI's client secret (better: the environment)").env(
        'VMOP_OIDC_CLIENT_SECRET',
      ),
    )
    .option('--oidc-scopes <scopes>', 'scopes asked for', 'openid profile email groups')
    .option(
      '--oidc-username-claim <claim>',
      "the claim naming the person (permissions' user): the provider's sub, a verified email, or one people cannot choose",
      'sub',
    )
    .option(
      '--oidc-groups-claim <claim>',
      "the claim listing the person's groups (permissions' role)",
      'groups',
    )
    .option('--kube-user-prefix <prefix>', "prefix of the person's name in RBAC checks", 'oidc:')
    .option('--kube-group-prefix <prefix>', 'prefix of their groups in RBAC checks', 'oidc:')
    .option(
      '--web-usage-sample-seconds <seconds>',
      "how often the admin view's 24-hour chart of CPUs and RAM in use gets a point",
      Number,
      60,
    )
    .action(async (flags) => {
      const parsed = ManagerOptions.safeParse({
        kubeconfig: flags.kubeconfig,
        namespaces: flags.namespace,
        redisUrl: flags.redis,
        concurrency: flags.concurrency,
        rateLimitPerSecond: flags.rateLimit,
        metricsPort: flags.metricsPort,
        runnerImage: flags.runnerImage,
        runnerImagePullPolicy: flags.runnerImagePullPolicy,
        allowedRunnerImages: flags.allowedRunnerImage,
        allowDisplayWithoutPassword: flags.allowDisplayWithoutPassword ?? false,
        kvm: flags.kvm,
        hostNetworkNamespaces: flags.hostNetworkNamespace,
        importDeniedNetworks: flags.importDeny,
        importAllowedNetworks: flags.importAllow,
        runnerRedisUrl: flags.runnerRedisUrl,
        runnerDataStorageClass: flags.runnerDataStorageClass,
        runnerDataAccessMode: flags.runnerDataAccessMode,
        evictionStrategy: flags.evictionStrategy,
        runnerUpdate: flags.runnerUpdate,
        migrationLimits: {
          perCluster: flags.parallelMigrations,
          outboundPerNode: flags.parallelOutboundMigrationsPerNode,
        },
        vmCidrs: flags.vmCidr,
        ipAddressHoldSeconds: flags.ipAddressHold,
        cpuOvercommit: flags.cpuOvercommit,
        ramOvercommit: flags.ramOvercommit,
        configNudge: flags.configNudge,
        loadBalancerService: {
          enabled: flags.loadBalancerService ?? false,
          labels: flags.loadBalancerServiceLabels,
          annotations: flags.loadBalancerServiceAnnotations,
        },
        runnerNetworkPolicy: {
          enabled: flags.runnerNetworkPolicy ?? false,
          ingressFrom: flags.runnerIngressFrom,
          metricsFrom: flags.runnerMetricsFrom,
        },
        resyncIntervalMs: flags.resyncInterval * 1000,
        ...(flags.webPort !== undefined && {
          web: {
            port: flags.webPort,
            host: flags.webHost,
            publicUrl: flags.webPublicUrl,
            allowPlainHttp: flags.webAllowPlainHttp ?? false,
            loginsPerMinute: flags.webLoginsPerMinute,
            loginsPerPersonPerMinute: flags.webLoginsPerPersonPerMinute,
            trustedProxies: flags.webTrustedProxy,
            oidc: {
              issuer: flags.oidcIssuer,
              clientId: flags.oidcClientId,
              clientSecret: flags.oidcClientSecret,
              scopes: flags.oidcScopes,
              usernameClaim: flags.oidcUsernameClaim,
              groupsClaim: flags.oidcGroupsClaim,
            },
            kubernetesUserPrefix: flags.kubeUserPrefix,
            kubernetesGroupPrefix: flags.kubeGroupPrefix,
            usageSampleSeconds: flags.webUsageSampleSeconds,
          },
        }),
      });
      if (!parsed.success) {
        for (const issue of parsed.error.issues)
          console.error(`vmop manager: ${formatFieldPath(issue.path)}: ${issue.message}`);
        process.exit(2);
      }
      // Handlers first: in a container the manager is PID 1, which ignores a SIGTERM it has no
      // handler for, also while it still waits for Redis or the apiserver.
      const running: { manager?: RunningManager } = {};
      const shutdown = () => {
        // Stopping waits for running reconciles and for Redis; a Redis that is gone must not make
        // kubelet wait out the whole grace period.
        setTimeout(() => {
          console.error(`vmop manager: not stopped after ${STOP_TIMEOUT_MS} ms; exiting`);
          process.exit(1);
        }, STOP_TIMEOUT_MS).unref();
        void (running.manager?.stop() ?? Promise.resolve()).finally(() => process.exit(0));
      };
      process.once('SIGTERM', shutdown);
      process.once('SIGINT', shutdown);
      running.manager = await startManager(parsed.data);
    });
}
