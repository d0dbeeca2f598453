// `vmop vm`: a user's verbs for VMs on any cluster (through the kubeconfig, with the user's own
// RBAC): start/stop/restart/reset/evict create VirtualMachineOperations, snapshot, restore and
// clone a VirtualMachineSnapshot, VirtualMachineRestore and VirtualMachineClone, list shows the VMs.
// Also installed as the kubectl plugin `kubectl vmop` (bin/kubectl-vmop).
import { Exec } from '@kubernetes/client-node';
import { PassThrough } from 'node:stream';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { Command, InvalidArgumentError, Option } from 'commander';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  OPERATION_KIND,
  OPERATION_PLURAL,
  VirtualMachineOperation,
  isFinished,
  operationApiRef,
  type OperationType,
} from '../api/virtual-machine-operation.js';
import { API_VERSION, GROUP, PLURAL, VERSION, VirtualMachine } from '../api/virtual-machine.js';
import { readableApiError } from '../kube/clients.js';
import { fail } from './failure.js';
import { OPERATION_VM_LABEL } from '../reconcilers/virtual-machine-operation/operations.js';
import { formatDuration, renderTable } from '../util/table.js';
import { connectionFile, spiceEndpoint } from '../console/connection-file.js';
import { SERIAL_RELAY_COMMAND, runnerPodOf } from '../console/runner-pod.js';
import { answerRelay } from '../console/relay-go.js';
import { displaySecretOf, setOneTimePassword } from '../console/one-time-password.js';
import { vmApiRef } from '../reconcilers/virtual-machine/naming.js';
import { exportDisks, type ExportCliOptions } from './vm-export.js';
import {
  exposeVm,
  parsePortPair,
  pipeToGuest,
  portForwardToGuest,
  sshToGuest,
  type ExposeOptions,
  type SshOptions,
} from './vm-ports.js';
import { repeatable } from './repeatable.js';
import { cliAction, context, parseTimeout } from './cli-context.js';
import { vncConsole, type VncOptions } from './vm-vnc.js';
import { findExecutable } from '../runner/executable.js';
import {
  createClone,
  createRestore,
  createSnapshot,
  type CloneCliOptions,
  type RestoreCliOptions,
  type SnapshotCliOptions,
} from './vm-snapshots.js';

interface VmCliOptions {
  kubeconfig?: string;
  namespace?: string;
  allNamespaces?: boolean;
  force?: boolean;
  /** migrate: the node to move to. */
  to?: string;
  wait?: boolean;
  timeout: number;
  output: 'table' | 'json';
}

interface ConsoleOptions extends VmCliOptions {
  spice?: boolean;
  file?: string;
  open?: boolean;
  validity: number;
}

const VERBS: Array<{ verb: string; type: OperationType; what: string; force?: boolean; to?: boolean }> = [
  { verb: 'start', type: 'Start', what: 'Start a VM' },
  { verb: 'stop', type: 'Stop', what: 'Stop a VM (gracefully; --force skips powerdownTimeout)', force: true },
  {
    verb: 'restart',
    type: 'Restart',
    what: 'Restart a VM in a new runner pod (applies restart-awaiting changes)',
    force: true,
  },
  { verb: 'reset', type: 'Reset', what: "Reset a running VM's guest (the machine's reset button)" },
  {
    verb: 'evict',
    type: 'Evict',
    what: 'Move a VM to another node: live if it can (its evictionStrategy), else stopped and started there',
  },
  { verb: 'migrate', type: 'Migrate', what: 'Move a running VM live to another node', to: true },
];

function parsePort(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new InvalidArgumentError('a port, 1 to 65535');
  return port;
}

async function createOperation(name: string, type: OperationType, options: VmCliOptions) {
  const { api, namespace } = context(options);
  const created = VirtualMachineOperation.parse(
    await api.createNamespacedCustomObject({
      ...operationApiRef(namespace),
      body: {
        apiVersion: API_VERSION,
        kind: OPERATION_KIND,
        metadata: { generateName: `${name}-${type.toLowerCase()}-`, labels: { [OPERATION_VM_LABEL]: name } },
        spec: {
          virtualMachineName: name,
          type,
          ...(options.force && { force: true }),
          ...(options.to && { migrate: { nodeName: options.to } }),
        },
      },
    }),
  );
  const opName = created.metadata.name;
  console.log(`virtualmachineoperation/${opName} created (${type} ${namespace}/${name})`);
  // Like `d8 v`: wait until the VM was told (InProgress), or with --wait until it is done.
  const deadline = Date.now() + options.timeout;
  for (;;) {
    const op = VirtualMachineOperation.parse(
      await api.getNamespacedCustomObject(operationApiRef(namespace, opName)),
    );
    const phase = op.status?.phase ?? 'Pending';
    if (isFinished(op) || (!options.wait && phase === 'InProgress')) {
      const line = `${opName}: ${phase}${op.status?.message ? ` (${op.status.message})` : ''}`;
      if (phase === 'Failed' || phase === 'Superseded') fail(line);
      console.log(line);
      return;
    }
    if (Date.now() > deadline) {
      fail(`${opName}: still ${phase} after ${formatDuration(options.timeout)}`);
    }
    await sleep(500);
  }
}

async function list(options: VmCliOptions) {
  const { api, namespace } = context(options);
  const scope = { group: GROUP, version: VERSION };
  const listOf = async (plural: string) =>
    (
      (options.allNamespaces
        ? await api.listClusterCustomObject({ ...scope, plural })
        : await api.listNamespacedCustomObject({ ...scope, plural, namespace })) as { items: unknown[] }
    ).items;
  const vms = (await listOf(PLURAL)).map((item) => VirtualMachine.parse(item));
  const operations = (await listOf(OPERATION_PLURAL)).map((item) => VirtualMachineOperation.parse(item));
  const now = Date.now();
  const lastOperation = (vm: VirtualMachine) => {
    const newest = operations
      .filter(
        (op) =>
          op.metadata.namespace === vm.metadata.namespace && op.spec.virtualMachineName === vm.metadata.name,
      )
      .sort((a, b) =>
        String(b.metadata.creationTimestamp).localeCompare(String(a.metadata.creationTimestamp)),
      )[0];
    if (!newest) return '';
    const age = formatDuration(now - new Date(newest.metadata.creationTimestamp ?? now).getTime());
    return `${newest.spec.type} ${newest.status?.phase ?? 'Pending'} (${age} ago)`;
  };
  const rows = vms.map((vm) => {
    const status = vm.status ?? {};
    const needRestart = status.conditions?.find((c) => c.type === 'AwaitingRestartToApplyConfiguration');
    return {
      namespace: vm.metadata.namespace ?? '',
      name: vm.metadata.name,
      phase: status.phase ?? '',
      node: status.node ?? '',
      cpus: status.cpus ?? null,
      ram: status.ram ?? '',
      needRestart: needRestart?.status === 'True',
      restartAwaitingChanges: status.restartAwaitingChanges ?? [],
      lastOperation: lastOperation(vm),
    };
  });
  if (options.output === 'json') {
    console.log(JSON.stringify(rows, null, 2));
    return;
  }
  const headers = ['NAME', 'PHASE', 'NODE', 'CPUS', 'RAM', 'NEED-RESTART', 'LAST-OPERATION'];
  const cells = rows.map((row) => [
    row.name,
    row.phase,
    row.node,
    row.cpus === null ? '' : String(row.cpus),
    row.ram,
    row.needRestart ? 'yes' : 'no',
    row.lastOperation,
  ]);
  console.log(
    options.allNamespaces
      ? renderTable(
          ['NAMESPACE', ...headers],
          cells.map((cell, i) => [rows[i]!.namespace, ...cell]),
        )
      : renderTable(headers, cells),
  );
}

/**
 * `vmop vm console NAME --spice`: a one-time password (the user's own right to patch the VM's
 * display Secret), then a `.vv` file for remote-viewer. The password is never printed.
 */
async function spiceConsole(name: string, options: ConsoleOptions) {
  const { api, core, namespace } = context(options);
  const vm = VirtualMachine.parse(await api.getNamespacedCustomObject(vmApiRef(namespace, name)));
  const pod = await core.readNamespacedPod({ name: runnerPodOf(vm), namespace }).catch(() => undefined);
  const endpoint = spiceEndpoint(vm, pod);
  if (typeof endpoint === 'string') fail(`vmop vm: ${endpoint}`);
  if (vm.status?.phase !== 'Running') {
    fail(`vmop vm: VM ${name} is ${vm.status?.phase ?? 'not running'}, not Running`);
  }
  const secret = await displaySecretOf(core, namespace, name);
  let password: string | undefined;
  if (secret) {
    const timeoutMs = options.timeout;
    password = await setOneTimePassword(
      { core, customObjects: api, namespace, vm, validitySeconds: options.validity / 1000, timeoutMs },
      secret,
    );
  } else {
    console.error(`warning: VM ${name} has no display Secret: its console is not locked`);
  }
  const file = options.file ?? `${name}.vv`;
  await writeFile(file, connectionFile(endpoint, `${namespace}/${name}`, password), { mode: 0o600 });
  const valid = password ? `; its password works for ${formatDuration(options.validity)}` : '';
  console.log(`${file} written (${endpoint.host}:${endpoint.port})${valid}`);
  if (options.open) {
    const viewer = findExecutable(['remote-viewer'], process.env.PATH);
    if (!viewer) fail('vmop vm: remote-viewer (virt-viewer) is not installed');
    spawn(viewer, [file], { stdio: 'ignore', detached: true }).unref();
  }
}

/** ^] leaves the serial console, as in telnet and virsh. */
const ESCAPE = 0x1d;

/**
 * `vmop vm console NAME`: the terminal on the guest's serial console, through the exec API into
 * the runner pod (the user's own pods/exec right). Raw mode locally; ^] leaves.
 */
async function serialConsole(name: string, options: ConsoleOptions) {
  const { api, kubeConfig, namespace } = context(options);
  const pod = runnerPodOf(
    VirtualMachine.parse(await api.getNamespacedCustomObject(vmApiRef(namespace, name))),
  );
  const toGuest = new PassThrough();
  const local = process.stdin;
  const raw = local.isTTY === true;
  process.stderr.write(`vmop: serial console of ${namespace}/${name}; ^] leaves\r\n`);
  let socket: { close(): void } | undefined;
  let leaving = false;
  const relay = answerRelay({ keys: toGuest, errors: process.stderr, stillWanted: () => !leaving });
  const ended = new Promise<string | undefined>((resolve) => {
    local.on('data', (chunk: Buffer) => {
      const escape = chunk.indexOf(ESCAPE);
      if (escape < 0) return void toGuest.write(chunk);
      if (escape > 0) toGuest.write(chunk.subarray(0, escape));
      resolve(undefined);
    });
    local.on('end', () => resolve(undefined));
    new Exec(kubeConfig)
      .exec(
        namespace,
        pod,
        'runner',
        SERIAL_RELAY_COMMAND,
        process.stdout,
        relay.relayErrors,
        relay.toRelay,
        false,
        (status) =>
          resolve(status.status === 'Success' ? undefined : (status.message ?? 'the console session failed')),
      )
      .then((ws) => {
        socket = ws;
        ws.on('close', () => resolve(undefined));
      })
      .catch((err: unknown) => resolve((readableApiError(err) as Error).message));
  });
  if (raw) local.setRawMode(true);
  const failure = await ended;
  leaving = true;
  if (raw) local.setRawMode(false);
  local.pause();
  socket?.close();
  process.stderr.write(`\r\nvmop: ${failure ? `console ended: ${failure}` : 'left the console'}\r\n`);
  process.exit(failure ? 1 : 0);
}

const action = cliAction('vmop vm');

export function register(program: Command): void {
  const vm = program
    .command('vm')
    .description('Start, stop, restart, reset, evict, migrate and list VMs (also `kubectl vmop …`)')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG or ~/.kube/config)')
    .option('-n, --namespace <namespace>', "namespace (default: the context's, else default)");
  for (const { verb, type, what, force, to } of VERBS) {
    const sub = vm.command(`${verb} <name>`).description(what);
    if (force) sub.option('-f, --force', 'do not wait for the guest to power down');
    if (to) sub.option('--to <node>', 'the node to move to (default: any other)');
    sub
      .option('-w, --wait', 'wait until the operation is done (default: until the VM was told)')
      .addOption(
        new Option('-t, --timeout <duration>', 'how long to wait')
          .default(5 * 60_000, '5m')
          .argParser(parseTimeout),
      )
      .action(action((name: string) => createOperation(name, type, sub.optsWithGlobals<VmCliOptions>())));
  }
  const snapshotCommand = vm
    .command('snapshot <name>')
    .description(
      'Snapshot a stopped VM: its disks, runner data (TPM, UEFI variables) and spec, as a VirtualMachineSnapshot',
    )
    .option('--name <snapshot>', "the snapshot's name (default: the VM's and a random suffix)")
    .option(
      '--allow-crash-consistent',
      'accept a snapshot that is only crash-consistent (requiredConsistency: false)',
    )
    .option('-w, --wait', 'wait until the snapshot is Ready (or Failed)')
    .addOption(
      new Option('-t, --timeout <duration>', 'how long to wait')
        .default(30 * 60_000, '30m')
        .argParser(parseTimeout),
    );
  snapshotCommand.action(
    action((name: string) => {
      const options = snapshotCommand.optsWithGlobals<VmCliOptions & SnapshotCliOptions>();
      const { api, namespace } = context(options);
      return createSnapshot(api, namespace, name, options);
    }),
  );
  const restoreCommand = vm
    .command('restore <name>')
    .description(
      "Write a snapshot's copies back onto a VM's disks and runner data, as a VirtualMachineRestore",
    )
    .requiredOption('--snapshot <snapshot>', 'the VirtualMachineSnapshot (of that VM) to restore')
    .option(
      '--stop',
      'stop the VM if it runs, and start it again once restored (default: wait until it is stopped)',
    )
    .option('-w, --wait', 'wait until the restore is Completed (or Failed)')
    .addOption(
      new Option('-t, --timeout <duration>', 'how long to wait')
        .default(30 * 60_000, '30m')
        .argParser(parseTimeout),
    );
  restoreCommand.action(
    action((name: string) => {
      const options = restoreCommand.optsWithGlobals<VmCliOptions & RestoreCliOptions>();
      const { api, namespace } = context(options);
      return createRestore(api, namespace, name, options);
    }),
  );
  const cloneCommand = vm
    .command('clone <name>')
    .description(
      'A new VM from a snapshot of this one (--snapshot), or from the VM itself, snapshotted first (running or stopped)',
    )
    .requiredOption('--name <new>', "the new VM's name")
    .option(
      '--snapshot <snapshot>',
      'the VirtualMachineSnapshot to clone (default: take one now, named NEW-source)',
    )
    .option('--start', 'start the new VM (default: the state the snapshot recorded)')
    .option('-w, --wait', 'wait until the new VM is made')
    .addOption(
      new Option('-t, --timeout <duration>', 'how long to wait')
        .default(30 * 60_000, '30m')
        .argParser(parseTimeout),
    );
  cloneCommand.action(
    action((name: string) => {
      const options = cloneCommand.optsWithGlobals<VmCliOptions & CloneCliOptions>();
      const { api, namespace } = context(options);
      return createClone(api, namespace, name, options);
    }),
  );
  const exportCommand = vm
    .command('export <name>')
    .description(
      "A stopped VM's disk (or a snapshot's) downloaded through the apiserver (-o FILE), or URLs with a token for pods in the cluster, as a VirtualMachineExport",
    )
    .option('--snapshot <snapshot>', "export this VirtualMachineSnapshot's copies instead of the VM's disks")
    .option('--disk <disk>', 'the disk (its volumeClaimTemplate name); needed with -o when there are several')
    .addOption(
      new Option('--format <format>', 'qcow2 (sparse) or raw').choices(['qcow2', 'raw']).default('qcow2'),
    )
    .option('-o, --output <file>', 'download the disk into FILE (the export goes afterwards unless --keep)')
    .option('--ttl <duration>', 'how long the export serves, e.g. 30m or 2h', '2h')
    .option('--name <export>', "the export's name (default: the VM's with -export- and a random suffix)")
    .option('--keep', 'keep the export after downloading (it goes when its ttl is over)')
    .addOption(
      new Option('-t, --timeout <duration>', 'how long to wait for the export to serve')
        .default(10 * 60_000, '10m')
        .argParser(parseTimeout),
    );
  exportCommand.action(
    action((name: string) => {
      const options = exportCommand.optsWithGlobals<VmCliOptions & ExportCliOptions>();
      const { kubeConfig, api, core, namespace } = context(options);
      const readToken = async (secret: string) => {
        const { data } = await core.readNamespacedSecret({ namespace, name: secret });
        return Buffer.from(data?.token ?? '', 'base64').toString('utf8');
      };
      return exportDisks(kubeConfig, api, readToken, namespace, name, options);
    }),
  );
  const portForwardCommand = vm
    .command('port-forward <name> <ports>')
    .description(
      "A local port to a guest port (LOCAL:GUEST, or GUEST for the same) through the apiserver, as kubectl port-forward; the guest port must be among a user network's ports",
    )
    .option('--address <address>', 'the local address to listen on', '127.0.0.1')
    .addOption(new Option('--stdio', 'one connection on stdin and stdout (an ssh ProxyCommand)').hideHelp());
  portForwardCommand.action(
    action((name: string, ports: string) => {
      const options = portForwardCommand.optsWithGlobals<
        VmCliOptions & { address: string; stdio?: boolean }
      >();
      const { kubeConfig, api, namespace } = context(options);
      const asked = parsePortPair(ports);
      if (options.stdio) return pipeToGuest(kubeConfig, api, namespace, name, asked.guest);
      return portForwardToGuest(kubeConfig, api, namespace, name, asked, options.address);
    }),
  );
  const sshCommand = vm
    .command('ssh <destination> [command...]')
    .description(
      "ssh to the guest ([USER@]NAME) through the apiserver, needing no Service and no address the guest has; port 22 must be among a user network's ports",
    )
    .option('-i, --identity <file>', "ssh's identity file")
    .option('-p, --port <port>', "the guest's SSH port", parsePort, 22)
    .addOption(
      repeatable('-o, --option <option>', 'an ssh option (-o), e.g. StrictHostKeyChecking=accept-new'),
    );
  sshCommand.action(
    action(async (destination: string, command: string[]) => {
      const options = sshCommand.optsWithGlobals<VmCliOptions & SshOptions>();
      const { api, namespace } = context(options);
      process.exitCode = await sshToGuest(api, namespace, destination, command, options);
    }),
  );
  const exposeCommand = vm
    .command('expose <name>')
    .description(
      "A Service that reaches a guest port: it selects the VM's runner pods, so it follows the VM to another node",
    )
    .requiredOption('--port <port>', "the Service's port", parsePort)
    .option(
      '--target-port <port>',
      "the guest's port (default: --port); among a user network's ports",
      parsePort,
    )
    .addOption(
      new Option('--type <type>', "the Service's type")
        .choices(['ClusterIP', 'NodePort', 'LoadBalancer'])
        .default('ClusterIP'),
    )
    .option('--name <service>', "the Service's name (default: the VM's)");
  exposeCommand.action(
    action((name: string) => {
      const options = exposeCommand.optsWithGlobals<VmCliOptions & ExposeOptions>();
      const { api, core, namespace } = context(options);
      return exposeVm(api, core, namespace, name, options);
    }),
  );
  const listCommand = vm
    .command('list')
    .description(
      'VMs with phase, node, CPUs, RAM, whether changes wait for a restart, and the last operation',
    )
    .option('-A, --all-namespaces', 'VMs of all namespaces')
    .addOption(
      new Option('-o, --output <format>', 'output format').choices(['table', 'json']).default('table'),
    );
  listCommand.action(action(() => list(listCommand.optsWithGlobals<VmCliOptions>())));

  const consoleCommand = vm
    .command('console <name>')
    .description(
      "A VM's serial console in this terminal (^] leaves); with --spice a one-time password and a virt-viewer .vv file",
    )
    .option('--spice', 'the SPICE display instead')
    .option('-o, --file <file>', '.vv file to write (default: NAME.vv)')
    .option('--open', 'open it with remote-viewer')
    .addOption(
      new Option('--validity <duration>', 'how long the password works once set')
        .default(10_000, '10s')
        .argParser(parseTimeout),
    )
    .addOption(
      new Option('-t, --timeout <duration>', 'how long to wait for the runner to set it')
        .default(60_000, '60s')
        .argParser(parseTimeout),
    );
  consoleCommand.action(
    action((name: string) => {
      const options = consoleCommand.optsWithGlobals<ConsoleOptions>();
      return options.spice ? spiceConsole(name, options) : serialConsole(name, options);
    }),
  );
  const vncCommand = vm
    .command('vnc <name>')
    .description(
      "A VM's VNC display on a local port through the apiserver, until Ctrl-C; its one-time password in a virt-viewer .vv file",
    )
    .option('-p, --port <port>', 'the local port (default: a free one)', parsePort, 0)
    .option('-o, --file <file>', '.vv file to write (default: NAME-vnc.vv)')
    .option('--open', 'open it with remote-viewer')
    .addOption(
      new Option('--validity <duration>', 'how long the password works once set (to connect, not to stay)')
        .default(60_000, '60s')
        .argParser(parseTimeout),
    )
    .addOption(
      new Option('-t, --timeout <duration>', 'how long to wait for the runner to set it')
        .default(60_000, '60s')
        .argParser(parseTimeout),
    );
  vncCommand.action(
    action((name: string) => {
      const options = vncCommand.optsWithGlobals<VmCliOptions & VncOptions>();
      return vncConsole(context(options), name, options);
    }),
  );
}
