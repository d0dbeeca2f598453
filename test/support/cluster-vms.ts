// VirtualMachines on a real cluster, the way a user handles them: kubectl against a kubeconfig,
// and the guest's serial console through `kubectl exec` into its runner pod.
import { execFile, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { expect } from 'vitest';
import { GROUP, PLURAL, VERSION, type VirtualMachineStatus } from '../../src/api/virtual-machine.js';
import { loadKubeConfig } from '../../src/kube/config.js';
import { DATA_DIR } from '../../src/reconcilers/virtual-machine/naming.js';
import { vmDirectoryName } from '../../src/runner/paths.js';
import { RUN_MARKER_PREFIX } from '../../src/runner/serial-log.js';
import { eventually } from './eventually.js';

const run = promisify(execFile);

/** A VM as kubectl shows it (the status is the schema's). */
export interface Vm {
  metadata: { name: string; generation: number; uid: string; annotations?: Record<string, string> };
  spec: { vm: { state: string } };
  status?: VirtualMachineStatus;
}

export interface TestGuestOptions {
  /** Extra lines under `spec:` (two-space indented YAML). */
  extraSpec?: string;
  currentCpus?: number;
  powerdownTimeout?: number;
  /** A SPICE display on this port of the node (host network); none by default, so VMs never collide. */
  spicePort?: number;
  /** A VNC display at this port (the runner pod's loopback). */
  vncPort?: number;
}

/** A VM that boots the test guest (from the namespace's image repository) under TCG. */
export function testGuestManifest(name: string, namespace: string, options: TestGuestOptions = {}): string {
  return `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${namespace}}
spec:
  runnerTemplate: {source: test-guest.liquid}
${options.extraSpec ?? ''}
  vm:
    state: Running
    maximumCpus: 2
    currentCpus: ${options.currentCpus ?? 1}
    maximumRam: 256Mi
    currentRam: 256Mi
    powerdownTimeout: ${options.powerdownTimeout ?? 60}
    networks: []
    display: ${displayOf(options)}
`;
}

function displayOf({ spicePort, vncPort }: TestGuestOptions): string {
  const displays = [
    ...(spicePort ? [`spice: {port: ${spicePort}}`] : []),
    ...(vncPort ? [`vnc: {port: ${vncPort}}`] : []),
  ];
  return displays.length > 0 ? `{${displays.join(', ')}}` : '{outputs: 1}';
}

/** Lines under spec: prefers `node` (the VM may run or move elsewhere), then `extra` (two-space indent). */
export const placedOn = (node: string, extra = '') => `  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        preference: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [${node}]}]}
${extra}`;

/** A data disk (the guest's /dev/vda) on the beds' shared (network) storage class: it goes wherever the VM goes. */
export const SHARED_DATA_DISK = `    disks:
    - volumeClaimTemplate:
        metadata: {name: data}
        spec:
          storageClassName: shared
          accessModes: [ReadWriteMany]
          resources: {requests: {storage: 16Mi}}
`;

/** The count of a guest's ticker line (`tick-N`); -1 for none. */
export const tickOf = (line: string | undefined) => Number(/tick-(\d+)/.exec(line ?? '')?.[1] ?? -1);

/** A console log's current run: from the last run's marker on. */
const currentRun = (log: string) => log.slice(Math.max(0, log.lastIndexOf(RUN_MARKER_PREFIX)));

export function clusterVms(kubeconfig: string, namespace: string) {
  const kubectl = async (args: string[], input?: string): Promise<string> => {
    const child = run('kubectl', ['--kubeconfig', kubeconfig, '-n', namespace, ...args], {
      maxBuffer: 32 * 1024 * 1024,
    });
    // A kubectl that ends before it reads its input (it failed, or needs none) closes the pipe: the
    // EPIPE of the write is no error of the test's (the exit code says what happened).
    child.child.stdin?.on('error', () => undefined);
    child.child.stdin?.end(input ?? '');
    return (await child).stdout;
  };
  // Read through the API, not kubectl: tests poll VMs every 500 ms, and a kubectl process costs
  // a tenth of a second of CPU each time (on two cores shared by whole clusters and TCG guests).
  const api = loadKubeConfig(kubeconfig).makeApiClient(CustomObjectsApi);
  const getVm = async (name: string): Promise<Vm> =>
    (await api.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: PLURAL,
      name,
    })) as Vm;
  /** All VMs of the namespace, in one read (one resourceVersion: their statuses at one moment). */
  const listVms = async (): Promise<Vm[]> =>
    (
      (await api.listNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
      })) as {
        items: Vm[];
      }
    ).items;
  const events = async (name: string): Promise<Array<{ reason: string; message: string }>> =>
    JSON.parse(
      await kubectl([
        'get',
        'events',
        '--field-selector',
        `involvedObject.kind=VirtualMachine,involvedObject.name=${name}`,
        '-o',
        'json',
      ]),
    ).items;
  const runnerDir = (name: string) => `/tmp/vmrunner/${vmDirectoryName(name)}`;
  /**
   * The VM's runner pod, as its status names it (after a migration it is not the VM's name), or
   * its one pod (one vmop has not named yet, e.g. a StatefulSet's).
   */
  const runnerPod = async (name: string) => {
    const named = (await getVm(name)).status?.runnerPod?.name;
    if (named) return named;
    const pods = await kubectl(['get', 'pods', '-l', `app.kubernetes.io/instance=${name}`, '-o', 'name']);
    return (
      pods
        .trim()
        .split('\n')[0]
        ?.replace(/^pod\//, '') || name
    );
  };
  const exec = async (name: string, command: string[]) =>
    kubectl(['exec', await runnerPod(name), '-c', 'runner', '--', ...command]);
  /**
   * Streams the pod's console log (all of it, then what is appended) to `seen` until it returns
   * true (resolves true), the stream ends (the pod went) or the deadline passes (both false).
   */
  const followConsole = (pod: string, deadline: number, seen: (chunk: string) => boolean) =>
    new Promise<boolean>((resolve) => {
      const child = spawn('kubectl', [
        ...['--kubeconfig', kubeconfig, '-n', namespace, 'exec', pod, '-c', 'runner', '--'],
        // Ended in the pod by its own deadline too: a disconnected exec does not stop it there.
        ...['timeout', String(Math.ceil((deadline - Date.now()) / 1000) + 1)],
        ...['tail', '-c', '+1', '-F', `${DATA_DIR}/console.log`],
      ]);
      const timer = setTimeout(() => settle(false), Math.max(0, deadline - Date.now()));
      const settle = (found: boolean) => {
        clearTimeout(timer);
        child.kill();
        resolve(found);
      };
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => seen(chunk) && settle(true));
      child.once('exit', () => settle(false));
      child.once('error', () => settle(false));
    });

  return {
    kubectl,
    getVm,
    listVms,
    runnerPod,
    /** Runs a command in the VM's runner container; its stdout. */
    exec,
    apply: (manifest: string) => kubectl(['apply', '-f', '-'], manifest),
    patchVm: (name: string, vm: object) =>
      kubectl(['patch', 'vm', name, '--type', 'merge', '-p', JSON.stringify({ spec: { vm } })]),
    condition: (vm: Vm, type: string) => vm.status?.conditions?.find((c) => c.type === type),
    /** Sets the SPICE password in the VM's display Secret (never expiring) and waits until qemu has it. */
    setDisplayPassword: async (name: string, password: string) => {
      const serial = (await getVm(name)).status?.displayPasswordSerial ?? 0;
      const data = { 'display-password': password, 'password-expiry': 'never' };
      await kubectl([
        'patch',
        'secret',
        `${name}-display-secret`,
        '--type',
        'merge',
        '-p',
        JSON.stringify({ stringData: data }),
      ]);
      await eventually(
        async () => expect((await getVm(name)).status?.displayPasswordSerial).toBeGreaterThan(serial),
        60_000,
      );
    },
    /**
     * Polls the VM until `check` passes (and returns the VM it passed on). When it never does, the
     * error also says what the VM, its runner pod and its Events were last: a rare failure in CI
     * must be explainable from its log alone.
     */
    waitForVm: async (name: string, check: (vm: Vm) => void, timeoutMs = 180_000) => {
      let last: Vm | undefined;
      try {
        return await eventually(
          async () => {
            last = await getVm(name);
            check(last);
            return last;
          },
          timeoutMs,
          500,
        );
      } catch (err) {
        const pod = await kubectl([
          'get',
          'pods',
          '-l',
          `app.kubernetes.io/instance=${name}`,
          '-o',
          'wide',
        ]).catch((e: Error) => e.message);
        const seen = await events(name).then(
          (list) => list.map((e) => `${e.reason}: ${e.message}`),
          (e: Error) => [e.message],
        );
        const guest = await exec(name, ['tail', '-c', '2000', `${DATA_DIR}/console.log`]).catch(
          (e: Error) => `(not readable: ${e.message.split('\n')[0]})`,
        );
        (err as Error).message +=
          `\n--- ${name} when the wait ended: spec.vm.state ${last?.spec.vm.state}, status ${JSON.stringify(last?.status)}` +
          `\n--- its runner pod:\n${pod}\n--- its Events:\n${seen.join('\n')}` +
          `\n--- the end of its console log:\n${guest}`;
        throw err;
      }
    },
    eventReasons: async (name: string): Promise<string[]> => (await events(name)).map((e) => e.reason),
    /** The VM's Events as `reason: message`. */
    eventMessages: async (name: string): Promise<string[]> =>
      (await events(name)).map((e) => `${e.reason}: ${e.message}`),
    /** The guest's serial console log in its runner pod's data volume: every run that it keeps. */
    wholeConsoleLog: (name: string) => exec(name, ['cat', `${DATA_DIR}/console.log`]).catch(() => ''),
    /** The guest's serial console output of the current run (from the run's marker on). */
    async consoleLog(name: string): Promise<string> {
      return currentRun(await this.wholeConsoleLog(name));
    },
    /** The last line of the current run's console output that matches `pattern`. */
    async lastConsoleLine(name: string, pattern: RegExp): Promise<string | undefined> {
      return (await this.consoleLog(name))
        .split(/\r?\n/)
        .filter((line) => pattern.test(line))
        .pop();
    },
    /**
     * Waits until the console output of the current run holds `text`. It follows the log (one
     * `tail -F` in the runner pod, again when the pod changes) rather than reading it over and over:
     * a `kubectl exec` costs a fifth of a second of CPU, every half second of a wait.
     */
    async waitForConsole(name: string, text: string, timeoutMs = 120_000): Promise<void> {
      const deadline = Date.now() + timeoutMs;
      let log = '';
      for (;;) {
        const pod = await runnerPod(name).catch(() => undefined);
        if (pod) {
          log = '';
          const found = await followConsole(pod, deadline, (chunk) => {
            log += chunk;
            return currentRun(log).includes(text);
          });
          if (found) return;
        }
        if (Date.now() > deadline) {
          expect.fail(
            `the console of ${name} lacks ${JSON.stringify(text)} after ${timeoutMs} ms:\n${currentRun(log).slice(-2000)}`,
          );
        }
        await sleep(500);
      }
    },
    /**
     * Types a line on the guest's serial console, as a user logged in there would. The guest's
     * terminal echoes it: a text a test then waits for must not be typed as is (`echo don''e`).
     */
    typeOnConsole: (name: string, line: string) =>
      exec(name, [
        'node',
        '-e',
        `const s = require('net').connect(process.argv[1], () => s.end(process.argv[2] + '\\n'));`,
        `${runnerDir(name)}/console-sessions.sock`,
        line,
      ]),
  };
}

export type ClusterVms = ReturnType<typeof clusterVms>;
