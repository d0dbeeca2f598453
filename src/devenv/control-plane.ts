import { execFile } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { z } from 'zod';
import { PooledKubeConfig } from '../kube/config.js';
import { freePort } from '../util/free-port.js';
import type { ProcessRef } from '../util/process.js';
import { createLogger, type Logger } from '../util/logger.js';
import { locateControlPlaneBinaries, type ControlPlaneBinaries } from './kube-binaries.js';
import { spawnLogged, type LoggedProcess } from './logged-process.js';
import { startProcessGroup, type ProcessGroup } from './process-group.js';
import { superviseProcess, type SupervisedProcess } from './supervised-process.js';

export interface ControlPlane {
  /** Admin access (group system:masters) through a bearer token. */
  kubeConfig: KubeConfig;
  kubeconfigPath: string;
  kubeconfigYaml: string;
  /** https://<address>:<port> */
  server: string;
  /** The address the apiserver (and the scheduler and controller manager) listen on. */
  address: string;
  token: string;
  /** What each node needs to join: its kubelet's and kube-proxy's kubeconfigs, and the CA of the apiserver's kubelet client certificate. */
  nodes: NodeCredentials[];
  /** Working directory: certificates, etcd data, kubeconfigs and one log file per process. */
  dir: string;
  /** A process by name (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), e.g. to inject faults. */
  process(name: string): SupervisedProcess | undefined;
  /** Every process, in the order they started. */
  readonly processes: readonly SupervisedProcess[];
  /** Stops the controllers, kube-apiserver and etcd, then removes the directory (if it made it). */
  stop(): Promise<void>;
}

export interface NodeCredentials {
  name: string;
  kubeletKubeconfig: string;
  kubeProxyKubeconfig: string;
  /** kubelet trusts client certificates of this CA: the apiserver's, for logs, exec and port-forward. */
  kubeletClientCaFile: string;
}

export interface StartControlPlaneOptions {
  /** Where the apiserver listens and what it advertises (pods reach it there); default 127.0.0.1. */
  address?: string;
  /** The names of the nodes that may join (a kubelet's identity is system:node:<name>); default [vmop-node-1]. */
  nodeNames?: string[];
  /** Use this (existing or not) directory and keep it on stop; default: a fresh temp dir, removed on stop. */
  dir?: string;
  logger?: Logger;
  binaries?: ControlPlaneBinaries;
  /** The process group its processes run in (its owner releases it); by default one of its own. */
  group?: ProcessGroup;
  /** Called when a process was started again by its supervisor. */
  onRestart?: () => void;
}

interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
  controllerManager: number;
  scheduler: number;
}

const READY_TIMEOUT_MS = 180_000;
const STOP_GRACE_MS = 10_000;
const SERVICE_ACCOUNT_ISSUER = 'https://kubernetes.default.svc.cluster.local';

/**
 * Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on free ports, waits
 * until the controllers run, and returns admin access. Abandoned harnesses leave nothing behind: every process
 * runs in a process group that is killed if this process dies without calling stop().
 */
export async function startControlPlane(options: StartControlPlaneOptions = {}): Promise<ControlPlane> {
  const logger = options.logger ?? createLogger('control-plane');
  const binaries = options.binaries ?? (await locateControlPlaneBinaries(logger));
  const address = options.address ?? '127.0.0.1';
  const nodeNames = options.nodeNames ?? ['vmop-node-1'];
  const ownsDir = options.dir === undefined;
  const dir = options.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'vmop-control-plane-')));
  await mkdir(dir, { recursive: true });
  const ownGroup = options.group
    ? undefined
    : await startProcessGroup({ name: 'control-plane', removeDir: ownsDir ? dir : undefined, logger });
  const group = options.group ?? ownGroup!;
  const processes: SupervisedProcess[] = [];
  /** Starts a process that is restarted (with back-off) when it dies, as kubelet does with static pods. */
  const launch = async (name: string, binary: string, args: string[]) => {
    const spawn = () => spawnLogged(name, binary, args, path.join(dir, `${name}.log`), { group });
    const first = await spawn();
    const onStart = (ref: ProcessRef) => {
      if (ref !== first.ref) options.onRestart?.();
    };
    processes.push(await superviseProcess(name, spawn, { logger, first, onStart }));
    return first;
  };

  const stopAll = async () => {
    // Controllers and apiserver first, etcd last, so nothing loses its storage while shutting down.
    const etcd = processes.filter((p) => p.name === 'etcd');
    await Promise.all(processes.filter((p) => p.name !== 'etcd').map((p) => p.stop(STOP_GRACE_MS)));
    await Promise.all(etcd.map((p) => p.stop(STOP_GRACE_MS)));
    await ownGroup?.release();
    if (ownsDir) await rm(dir, { recursive: true, force: true });
  };

  try {
    const startedAt = Date.now();
    const ports = await distinctFreePorts(address);
    const files = await writeCredentials(dir, nodeNames);
    logger.info({ dir, ports }, 'starting control plane');

    const etcd = await launch('etcd', binaries.etcd, etcdArgs(dir, ports));
    await waitUntil(etcd, () => etcdHealthy(ports.etcdClient));

    const apiserver = await launch(
      'kube-apiserver',
      binaries.kubeApiserver,
      apiserverArgs(address, ports, files),
    );
    const server = `https://${address}:${ports.apiserver}`;
    await waitUntil(apiserver, () =>
      isOk(`${server}/readyz`, { caFile: files.apiserverCert, token: files.tokens.admin }),
    );
    const caPem = await readFile(files.apiserverCert, 'utf8');
    const adminYaml = kubeconfigYaml({ server, caPem, user: 'vmop-admin', token: files.tokens.admin });
    const kubeconfigPath = path.join(dir, 'admin.kubeconfig');
    await writeFile(kubeconfigPath, adminYaml, { mode: 0o600 });
    const writeKubeconfig = async (who: string, token: string) => {
      const file = path.join(dir, `${who}.kubeconfig`);
      await writeFile(file, kubeconfigYaml({ server, caPem, user: who, token }), { mode: 0o600 });
      return file;
    };
    const kubeconfigFiles = {
      controllerManager: await writeKubeconfig('controllerManager', files.tokens.controllerManager),
      scheduler: await writeKubeconfig('scheduler', files.tokens.scheduler),
      kubeProxy: await writeKubeconfig('kubeProxy', files.tokens.kubeProxy),
    };
    const kubeletKubeconfigs = await Promise.all(
      nodeNames.map((name) => writeKubeconfig(`kubelet-${name}`, files.kubeletTokens[name]!)),
    );

    const controllerManager = await launch(
      'kube-controller-manager',
      binaries.kubeControllerManager,
      controllerManagerArgs(dir, address, ports, files, kubeconfigFiles.controllerManager),
    );
    const scheduler = await launch(
      'kube-scheduler',
      binaries.kubeScheduler,
      schedulerArgs(dir, address, ports, kubeconfigFiles.scheduler),
    );
    const kubeConfig = new PooledKubeConfig();
    kubeConfig.loadFromString(adminYaml);
    await waitUntil(controllerManager, () =>
      isOk(`https://${address}:${ports.controllerManager}/healthz`, {
        caFile: path.join(dir, 'controller-manager-certs', 'kube-controller-manager.crt'),
      }),
    );
    await waitUntil(scheduler, () =>
      isOk(`https://${address}:${ports.scheduler}/healthz`, {
        caFile: path.join(dir, 'scheduler-certs', 'kube-scheduler.crt'),
      }),
    );
    // Healthy is not yet running: the serviceaccount controller creating `default` shows controllers work.
    const core = kubeConfig.makeApiClient(CoreV1Api);
    await waitUntil(controllerManager, () =>
      core.readNamespacedServiceAccount({ namespace: 'default', name: 'default' }).then(
        () => true,
        () => false,
      ),
    );
    logger.info({ server, dir, ms: Date.now() - startedAt }, 'control plane ready');

    let stopping: Promise<void> | undefined;
    return {
      kubeConfig,
      kubeconfigPath,
      kubeconfigYaml: adminYaml,
      server,
      address,
      token: files.tokens.admin,
      nodes: nodeNames.map((name, i) => ({
        name,
        kubeletKubeconfig: kubeletKubeconfigs[i]!,
        kubeProxyKubeconfig: kubeconfigFiles.kubeProxy,
        kubeletClientCaFile: files.kubeletClientCa,
      })),
      dir,
      process: (name) => processes.find((p) => p.name === name),
      processes,
      stop: () => (stopping ??= stopAll().then(() => logger.info({ dir }, 'control plane stopped'))),
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

type Identity = 'admin' | 'controllerManager' | 'scheduler' | 'kubeProxy';

interface CredentialFiles {
  tokens: Record<Identity, string>;
  /** Each node's kubelet's, by node name. */
  kubeletTokens: Record<string, string>;
  tokenFile: string;
  serviceAccountKey: string;
  serviceAccountPublicKey: string;
  apiserverCert: string;
  /** The CA kubelet trusts for client certificates, and the apiserver's certificate of it. */
  kubeletClientCa: string;
  apiserverKubeletClientCert: string;
  apiserverKubeletClientKey: string;
}

const run = promisify(execFile);

async function writeCredentials(dir: string, nodeNames: string[]): Promise<CredentialFiles> {
  const token = () => randomBytes(24).toString('hex');
  const tokens: Record<Identity, string> = {
    admin: token(),
    controllerManager: token(),
    scheduler: token(),
    kubeProxy: token(),
  };
  const kubeletTokens = Object.fromEntries(nodeNames.map((name) => [name, token()]));
  // token,user,uid,"groups". The controller manager and the scheduler are in system:masters: they
  // run under one identity each, and for a local harness full rights are simpler than assembling
  // the union of their roles. kubelet and kube-proxy have the identities a real cluster gives them
  // (the Node authorizer and the default system:node-proxier binding grant their rights).
  const tokenFile = path.join(dir, 'tokens.csv');
  await writeFile(
    tokenFile,
    [
      `${tokens.admin},vmop-admin,vmop-admin,"system:masters"`,
      `${tokens.controllerManager},system:kube-controller-manager,kube-controller-manager,"system:masters"`,
      `${tokens.scheduler},system:kube-scheduler,kube-scheduler,"system:masters"`,
      ...nodeNames.map((name) => `${kubeletTokens[name]},system:node:${name},kubelet-${name},"system:nodes"`),
      `${tokens.kubeProxy},system:kube-proxy,kube-proxy`,
    ].join('\n') + '\n',
    { mode: 0o600 },
  );
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
  const serviceAccountKey = path.join(dir, 'service-account.key');
  const serviceAccountPublicKey = path.join(dir, 'service-account.pub');
  await writeFile(serviceAccountKey, privateKey, { mode: 0o600 });
  await writeFile(serviceAccountPublicKey, publicKey);
  return {
    tokens,
    kubeletTokens,
    tokenFile,
    serviceAccountKey,
    serviceAccountPublicKey,
    // kube-apiserver writes its self-signed serving certificate (with its CA) here on first start.
    apiserverCert: path.join(dir, 'apiserver-certs', 'apiserver.crt'),
    ...(await writeKubeletClientCertificates(path.join(dir, 'kubelet-client'))),
  };
}

/**
 * A CA for kubelet's client authentication and the apiserver's client certificate from it
 * (Node's crypto cannot issue certificates; openssl can). Its group system:masters lets kubelet's
 * webhook authorization allow the apiserver's logs, exec and port-forward requests.
 */
async function writeKubeletClientCertificates(dir: string) {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const file = (name: string) => path.join(dir, name);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await run('openssl', [
    ...['req', '-x509', ...ec, '-days', '3650', '-subj', '/CN=vmop-kubelet-client-ca'],
    ...['-keyout', file('ca.key'), '-out', file('ca.crt')],
  ]);
  await run('openssl', [
    ...['req', ...ec, '-subj', '/O=system:masters/CN=kube-apiserver-kubelet-client'],
    ...['-keyout', file('apiserver.key'), '-out', file('apiserver.csr')],
  ]);
  await run('openssl', [
    ...['x509', '-req', '-in', file('apiserver.csr'), '-days', '3650', '-set_serial', '1'],
    ...['-CA', file('ca.crt'), '-CAkey', file('ca.key'), '-out', file('apiserver.crt')],
  ]);
  return {
    kubeletClientCa: file('ca.crt'),
    apiserverKubeletClientCert: file('apiserver.crt'),
    apiserverKubeletClientKey: file('apiserver.key'),
  };
}

function etcdArgs(dir: string, ports: Ports): string[] {
  const client = `http://127.0.0.1:${ports.etcdClient}`;
  const peer = `http://127.0.0.1:${ports.etcdPeer}`;
  return [
    '--name=control-plane',
    `--data-dir=${path.join(dir, 'etcd')}`,
    `--listen-client-urls=${client}`,
    `--advertise-client-urls=${client}`,
    `--listen-peer-urls=${peer}`,
    `--initial-advertise-peer-urls=${peer}`,
    `--initial-cluster=control-plane=${peer}`,
    // Throwaway data: skipping fsync makes every write much cheaper on a shared disk.
    '--unsafe-no-fsync',
    '--log-level=warn',
  ];
}

/** Services get addresses from here; the first is the apiserver's (`kubernetes.default`). */
export const SERVICE_CIDR = '10.0.0.0/24';
/** The cluster DNS Service's address (the tenth of SERVICE_CIDR, as kubeadm chooses it). */
export const CLUSTER_DNS_IP = '10.0.0.10';

function apiserverArgs(address: string, ports: Ports, files: CredentialFiles): string[] {
  return [
    `--etcd-servers=http://127.0.0.1:${ports.etcdClient}`,
    `--bind-address=${address}`,
    `--advertise-address=${address}`,
    `--secure-port=${ports.apiserver}`,
    `--cert-dir=${path.dirname(files.apiserverCert)}`,
    `--token-auth-file=${files.tokenFile}`,
    '--authorization-mode=Node,RBAC',
    `--service-account-key-file=${files.serviceAccountPublicKey}`,
    `--service-account-signing-key-file=${files.serviceAccountKey}`,
    `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    `--kubelet-client-certificate=${files.apiserverKubeletClientCert}`,
    `--kubelet-client-key=${files.apiserverKubeletClientKey}`,
    '--kubelet-preferred-address-types=InternalIP',
    '--allow-privileged=true',
  ];
}

function controllerManagerArgs(
  dir: string,
  address: string,
  ports: Ports,
  files: CredentialFiles,
  kubeconfig: string,
): string[] {
  return [
    `--kubeconfig=${kubeconfig}`,
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    `--bind-address=${address}`,
    `--secure-port=${ports.controllerManager}`,
    `--cert-dir=${path.join(dir, 'controller-manager-certs')}`,
    '--leader-elect=false',
    // Every default controller: statefulset, garbagecollector, namespace, pvc-protection, serviceaccount…
    '--controllers=*',
    `--service-account-private-key-file=${files.serviceAccountKey}`,
    `--root-ca-file=${files.apiserverCert}`,
    '--use-service-account-credentials=false',
    // A node that stops reporting is NotReady (Ready Unknown) after 20 s here (50 s by default):
    // tests of node loss wait less; nothing else depends on it.
    '--node-monitor-grace-period=20s',
    '--node-monitor-period=2s',
  ];
}

function schedulerArgs(dir: string, address: string, ports: Ports, kubeconfig: string): string[] {
  return [
    `--kubeconfig=${kubeconfig}`,
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    `--bind-address=${address}`,
    `--secure-port=${ports.scheduler}`,
    `--cert-dir=${path.join(dir, 'scheduler-certs')}`,
    '--leader-elect=false',
  ];
}

/** A kubeconfig with one cluster, one token user and one current context. */
function kubeconfigYaml(input: { server: string; caPem: string; user: string; token: string }): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'vmop',
        cluster: {
          server: input.server,
          'certificate-authority-data': Buffer.from(input.caPem).toString('base64'),
        },
      },
    ],
    users: [{ name: input.user, user: { token: input.token } }],
    contexts: [{ name: 'vmop', context: { cluster: 'vmop', user: input.user } }],
    'current-context': 'vmop',
  });
}

async function distinctFreePorts(address: string): Promise<Ports> {
  const taken = new Set<number>();
  // The kernel hands out a port free at that address; the set keeps them distinct.
  const port = async (host: string) => {
    for (;;) {
      const candidate = await freePort(host);
      if (taken.has(candidate)) continue;
      taken.add(candidate);
      return candidate;
    }
  };
  return {
    etcdClient: await port('127.0.0.1'),
    etcdPeer: await port('127.0.0.1'),
    apiserver: await port(address),
    controllerManager: await port(address),
    scheduler: await port(address),
  };
}

/** Polls check() until it holds; throws with the log tail when the process exits or time runs out. */
async function waitUntil(child: LoggedProcess, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.hasExited()) {
      const how = await child.exited;
      throw new Error(
        `${child.name} exited (${how}) before it was ready; ${child.logPath}:\n${await child.logTail()}`,
      );
    }
    if (await check()) return;
    if (Date.now() > deadline) {
      throw new Error(
        `${child.name} not ready after ${READY_TIMEOUT_MS} ms; ${child.logPath}:\n${await child.logTail()}`,
      );
    }
    await sleep(200);
  }
}

const EtcdHealth = z.object({ health: z.literal('true') });

async function etcdHealthy(clientPort: number): Promise<boolean> {
  const response = await get(`http://127.0.0.1:${clientPort}/health`, {});
  if (response?.status !== 200) return false;
  try {
    return EtcdHealth.safeParse(JSON.parse(response.body)).success;
  } catch {
    return false;
  }
}

async function isOk(url: string, options: { caFile: string; token?: string }): Promise<boolean> {
  // The serving certificate appears only once the process has generated it.
  const ca = await readFile(options.caFile, 'utf8').catch(() => undefined);
  if (ca === undefined) return false;
  const response = await get(url, { ca, token: options.token });
  return response?.status === 200 && response.body === 'ok';
}

/** One GET; undefined when nothing answers (yet). */
function get(
  url: string,
  options: { ca?: string; token?: string },
): Promise<{ status: number; body: string } | undefined> {
  const headers = options.token ? { authorization: `Bearer ${options.token}` } : {};
  const request = url.startsWith('https:')
    ? https.get(url, { ca: options.ca, headers, timeout: 5_000 })
    : http.get(url, { headers, timeout: 5_000 });
  return new Promise((resolve) => {
    request.on('response', (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      response.on('error', () => resolve(undefined));
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolve(undefined));
  });
}
