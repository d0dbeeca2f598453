import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import { sendDevCommand, type DevCommand } from '../devenv/dev-control.js';
import {
  VMOP_BIN,
  controlSocket,
  devDir,
  readDevState,
  RedisLayout,
  superviseDevEnvironment,
  type DevState,
} from '../devenv/dev-environment.js';
import { redisWhere } from '../queue/connection.js';
import { repeatable } from './repeatable.js';
import { isRunning, signalProcess, type ProcessRef } from '../util/process.js';

/** --redis: single or sentinel. */
function redisLayout(value: string): RedisLayout {
  const parsed = RedisLayout.safeParse(value);
  if (!parsed.success) throw new Error(`--redis: ${JSON.stringify(value)} is not single or sentinel`);
  return parsed.data;
}

/** --nodes: a whole number from 1 to 8 (each node costs a kubelet, containerd and kube-proxy). */
function nodeCount(value: string): number {
  const count = Number(value);
  if (!Number.isInteger(count) || count < 1 || count > 8)
    throw new Error(`--nodes: ${JSON.stringify(value)} is not a whole number from 1 to 8`);
  return count;
}

const UP_TIMEOUT_MS = 30 * 60_000; // a first run builds Kubernetes and the images
const DOWN_TIMEOUT_MS = 180_000;

function printState(state: DevState, output: string | undefined): void {
  if (output === 'json') {
    const alive = <T extends ProcessRef>(p: T) => ({ ...p, alive: isRunning(p) });
    const redis =
      state.redis.layout === 'single'
        ? alive(state.redis)
        : {
            ...state.redis,
            servers: state.redis.servers.map(alive),
            sentinels: state.redis.sentinels.map(alive),
          };
    const processes = {
      managers: state.managers.map(alive),
      redis,
      controlPlane: state.controlPlane.map(alive),
    };
    console.log(JSON.stringify({ running: true, ...state, ...processes }, null, 2));
    return;
  }
  console.log(`vmop dev is up (supervisor pid ${state.supervisor.pid}); logs in ${devDir()}`);
  // The Sentinel layout's URL holds passwords: its full form only in -o json (for scripts).
  console.log(
    `Redis:      ${state.redis.layout === 'single' ? state.redisUrl : `${redisWhere(state.redisUrl)} (URL with credentials: -o json)`}`,
  );
  console.log(`kubeconfig: ${state.kubeconfig}`);
  console.log(
    `images:     ${state.imageServer.url}/ serves ${state.imageServer.dir} (test-guest.qcow2 boots)`,
  );
  console.log(
    `registry:   ${state.imageRegistry.address} (plain HTTP; ${state.imageRegistry.testGuestImage} boots)`,
  );
  console.log(`web GUI:    ${state.web.urls.join(' or ')} (any replica)`);
  console.log(
    `log in as:  ${state.web.people.map((p) => p.user).join(', ')} (password "${state.web.password}") at ${state.web.issuer}`,
  );
  for (const node of state.cluster.nodes)
    console.log(`node:       ${node} (kubelet and containerd logs in ${state.cluster.dir}/${node})`);
  const liveness = (p: ProcessRef & { restarts: number }) =>
    `pid ${p.pid} ${isRunning(p) ? 'alive' : 'dead (restarting)'}${p.restarts > 0 ? `, restarted ${p.restarts}x` : ''}`;
  if (state.redis.layout === 'single') console.log(`redis:      ${liveness(state.redis)}`);
  else {
    const { servers, sentinels } = state.redis;
    // Not restarted: the set survives losing one; `vmop dev down` and `up` make a new one.
    const pids = (processes: Array<ProcessRef & { port: number }>) =>
      processes.map((p) => `:${p.port} pid ${p.pid} ${isRunning(p) ? 'alive' : 'dead'}`).join(', ');
    console.log(`redis:      Sentinel set; servers ${pids(servers)}`);
    console.log(`sentinels:  ${pids(sentinels)}`);
  }
  state.managers.forEach((m, i) => console.log(`manager-${i + 1}:  ${liveness(m)}; log ${m.log}`));
  for (const p of state.controlPlane) console.log(`${p.name}: ${liveness(p)}`);
  for (const { node, services } of state.nodeServices)
    for (const service of services) console.log(`${node} ${service.name}: ${liveness(service)}`);
  console.log(`Use it:     export KUBECONFIG=${state.kubeconfig}; kubectl get vms -A`);
}

/** The layout `up` and `serve` take from their flags. */
interface LayoutFlags {
  nodes: string;
  redis: string;
  vmCidr: string[];
  /** commander's --no-kvm: false when given. */
  kvm: boolean;
}
const layoutOf = (flags: LayoutFlags) => ({
  nodes: nodeCount(flags.nodes),
  redis: redisLayout(flags.redis),
  vmCidrs: flags.vmCidr,
  // Absent: the environment decides by /dev/kvm.
  ...(flags.kvm === false && { kvm: false }),
});
const NO_KVM_HELP =
  'VMs emulate (QEMU TCG) even where this machine has /dev/kvm: where nested KVM cannot boot Linux';

async function up(output: string | undefined, flags: LayoutFlags): Promise<void> {
  const { nodes, redis, vmCidrs } = layoutOf(flags);
  const running = readDevState();
  if (running) {
    if (running.cluster.nodes.length !== nodes || running.redis.layout !== redis)
      console.error(
        `vmop dev runs with ${running.cluster.nodes.length} node(s) and Redis ${running.redis.layout}; ` +
          `\`vmop dev down\` first for ${nodes} and ${redis}`,
      );
    return printState(running, output);
  }
  const dir = devDir();
  mkdirSync(dir, { recursive: true });
  const logPath = join(dir, 'supervisor.log');
  const log = openSync(logPath, 'a');
  const serveArgs = [
    '--nodes',
    String(nodes),
    '--redis',
    redis,
    ...vmCidrs.flatMap((cidr) => ['--vm-cidr', cidr]),
    ...(flags.kvm === false ? ['--no-kvm'] : []),
  ];
  const supervisor = spawn(VMOP_BIN, ['dev', 'serve', ...serveArgs], {
    detached: true,
    stdio: ['ignore', log, log],
  });
  closeSync(log);
  supervisor.unref();
  const deadline = Date.now() + UP_TIMEOUT_MS;
  for (;;) {
    const state = readDevState();
    if (state) return printState(state, output);
    if (supervisor.exitCode !== null || supervisor.signalCode !== null)
      throw new Error(`vmop dev failed to start; see ${logPath}`);
    if (Date.now() > deadline)
      throw new Error(`vmop dev not up after ${UP_TIMEOUT_MS / 1000} s; see ${logPath}`);
    await sleep(250);
  }
}

async function down(): Promise<void> {
  const state = readDevState();
  if (!state) return console.log('vmop dev is not running');
  // Only the supervisor the state names (pid and start time): a recycled pid is someone else's.
  signalProcess(state.supervisor, 'SIGTERM');
  const deadline = Date.now() + DOWN_TIMEOUT_MS;
  while (isRunning(state.supervisor)) {
    if (Date.now() > deadline) {
      // Its process groups' reapers take everything it started down with it.
      signalProcess(state.supervisor, 'SIGKILL');
      break;
    }
    await sleep(250);
  }
  console.log('vmop dev is down');
}

async function control(command: DevCommand): Promise<void> {
  if (!readDevState()) throw new Error('vmop dev is not running');
  await sendDevCommand(controlSocket(), command);
}

const VM_CIDR_FLAG = '--vm-cidr <subnet>';
const VM_CIDR_HELP =
  "give every VM an address of its own from this subnet (the managers' --vm-cidr; repeatable)";

export function register(program: Command): void {
  const dev = program
    .command('dev')
    .description(
      `A whole local vmop in the background: a local Kubernetes (one node, or --nodes N), Redis, two managers (in $VMOP_DEV_DIR, default ~/.vmop/dev)`,
    );
  dev
    .command('up')
    .description('Start it (or show it, when it runs already)')
    .option('-o, --output <format>', 'json for scripts')
    .option('--nodes <n>', 'how many nodes (each a kubelet, containerd and kube-proxy)', '1')
    .option(
      '--redis <layout>',
      'single, or sentinel: 3 Redis and 3 Sentinels as the chart runs them',
      'single',
    )
    .addOption(repeatable(VM_CIDR_FLAG, VM_CIDR_HELP))
    .option('--no-kvm', NO_KVM_HELP)
    .action(async (flags: LayoutFlags & { output?: string }) => up(flags.output, flags));
  dev.command('down').description('Stop everything it started').action(down);
  dev
    .command('status')
    .description('Where it is: kubeconfig, Redis URL, process ids')
    .option('-o, --output <format>', 'json for scripts')
    .action((flags: { output?: string }) => {
      const state = readDevState();
      if (state) return printState(state, flags.output);
      if (flags.output === 'json') console.log(JSON.stringify({ running: false }));
      else console.log('vmop dev is not running');
      process.exitCode = 3;
    });
  // What happens to a node or Redis in production, on demand: see how vmop and the VMs take it.
  const node = dev
    .command('node')
    .description('Do to a node what a data centre might: stop it, cut its power, start it');
  const nodeCommand = (name: string, command: 'node-stop' | 'node-power-off' | 'node-start', what: string) =>
    node
      .command(`${name} <node>`)
      .description(what)
      .action((nodeName: string) => control({ command, node: nodeName }));
  nodeCommand(
    'stop',
    'node-stop',
    'Its kubelet, containerd and kube-proxy stop: it goes NotReady, its VMs run on',
  );
  nodeCommand(
    'power-off',
    'node-power-off',
    "As a power loss: its services stop and its pods' processes die",
  );
  nodeCommand('start', 'node-start', 'Its services start again');
  dev
    .command('redis')
    .description('Do to Redis what a crash would')
    .command('lose')
    .description('Every Redis server (and Sentinel) dies and comes back empty, as one without persistence')
    .action(() => control({ command: 'redis-lose' }));
  dev
    .command('serve', { hidden: true })
    .description('Run the environment in the foreground (what `up` starts detached)')
    .option('--nodes <n>', 'how many nodes', '1')
    .option('--redis <layout>', 'single or sentinel', 'single')
    .addOption(repeatable(VM_CIDR_FLAG, VM_CIDR_HELP))
    .option('--no-kvm', NO_KVM_HELP)
    .action((flags: LayoutFlags) => superviseDevEnvironment(undefined, layoutOf(flags)));
}
