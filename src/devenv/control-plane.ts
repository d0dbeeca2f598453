import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { z } from 'zod';
import { freePort } from '../util/free-port.js';
import { createLogger, type Logger } from '../util/logger.js';
import { locateControlPlaneBinaries, type ControlPlaneBinaries } from './kube-binaries.js';
import { spawnLogged, type LoggedProcess } from './logged-process.js';
import { startOrphanReaper } from './orphan-reaper.js';

export interface ControlPlane {
  /** Admin access (group system:masters) through a bearer token. */
  kubeConfig: KubeConfig;
  kubeconfigPath: string;
  kubeconfigYaml: string;
  /** https://127.0.0.1:<port> */
  server: string;
  token: string;
  /** Working directory: certificates, etcd data, kubeconfigs and one log file per process. */
  dir: string;
  /** Stops kube-controller-manager, kube-apiserver and etcd, then removes the directory (if it made it). */
  stop(): Promise<void>;
}

export interface StartControlPlaneOptions {
  /** Use this (existing or not) directory and keep it on stop; default: a fresh temp dir, removed on stop. */
  dir?: string;
  logger?: Logger;
  binaries?: ControlPlaneBinaries;
}

interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
  controllerManager: number;
}

const READY_TIMEOUT_MS = 180_000;
const STOP_GRACE_MS = 10_000;
const SERVICE_ACCOUNT_ISSUER = 'https://kubernetes.default.svc.cluster.local';

/**
 * Starts etcd, kube-apiserver and kube-controller-manager on free loopback ports, waits until the
 * controllers run, and returns admin access. Abandoned harnesses leave nothing behind: every process
 * is adopted by an orphan reaper that kills them if this process dies without calling stop().
 */
export async function startControlPlane(options: StartControlPlaneOptions = {}): Promise<ControlPlane> {
  const logger = options.logger ?? createLogger('control-plane');
  const binaries = options.binaries ?? (await locateControlPlaneBinaries(logger));
  const ownsDir = options.dir === undefined;
  const dir = options.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'vmop-control-plane-')));
  await mkdir(dir, { recursive: true });
  const reaper = startOrphanReaper({ removeDir: ownsDir ? dir : undefined, logger });
  const processes: LoggedProcess[] = [];
  const launch = async (name: string, binary: string, args: string[]) => {
    const started = await spawnLogged(name, binary, args, path.join(dir, `${name}.log`));
    reaper.adopt(started.pid);
    processes.push(started);
    return started;
  };

  const stopAll = async () => {
    // Controllers and apiserver first, etcd last, so nothing loses its storage while shutting down.
    const etcd = processes.filter((p) => p.name === 'etcd');
    await Promise.all(processes.filter((p) => p.name !== 'etcd').map((p) => p.stop(STOP_GRACE_MS)));
    await Promise.all(etcd.map((p) => p.stop(STOP_GRACE_MS)));
    await reaper.release();
    if (ownsDir) await rm(dir, { recursive: true, force: true });
  };

  try {
    const startedAt = Date.now();
    const ports = await distinctFreePorts();
    const files = await writeCredentials(dir);
    logger.info({ dir, ports }, 'starting control plane');

    const etcd = await launch('etcd', binaries.etcd, etcdArgs(dir, ports));
    await waitUntil(etcd, () => etcdHealthy(ports.etcdClient));

    const apiserver = await launch('kube-apiserver', binaries.kubeApiserver, apiserverArgs(ports, files));
    const server = `https://127.0.0.1:${ports.apiserver}`;
    await waitUntil(apiserver, () =>
      isOk(`${server}/readyz`, { caFile: files.apiserverCert, token: files.adminToken }),
    );
    const caPem = await readFile(files.apiserverCert, 'utf8');
    const adminYaml = kubeconfigYaml({ server, caPem, user: 'vmop-admin', token: files.adminToken });
    const controllerManagerYaml = kubeconfigYaml({
      server,
      caPem,
      user: 'kube-controller-manager',
      token: files.controllerManagerToken,
    });
    const kubeconfigPath = path.join(dir, 'admin.kubeconfig');
    await writeFile(kubeconfigPath, adminYaml, { mode: 0o600 });
    await writeFile(files.controllerManagerKubeconfig, controllerManagerYaml, { mode: 0o600 });

    const controllerManager = await launch(
      'kube-controller-manager',
      binaries.kubeControllerManager,
      controllerManagerArgs(dir, ports, files),
    );
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(adminYaml);
    await waitUntil(controllerManager, () =>
      isOk(`https://127.0.0.1:${ports.controllerManager}/healthz`, {
        caFile: path.join(dir, 'controller-manager-certs', 'kube-controller-manager.crt'),
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
      token: files.adminToken,
      dir,
      stop: () => (stopping ??= stopAll().then(() => logger.info({ dir }, 'control plane stopped'))),
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

interface CredentialFiles {
  adminToken: string;
  controllerManagerToken: string;
  tokenFile: string;
  serviceAccountKey: string;
  serviceAccountPublicKey: string;
  apiserverCert: string;
  controllerManagerKubeconfig: string;
}

async function writeCredentials(dir: string): Promise<CredentialFiles> {
  const adminToken = randomBytes(24).toString('hex');
  const controllerManagerToken = randomBytes(24).toString('hex');
  const tokenFile = path.join(dir, 'tokens.csv');
  // token,user,uid,"groups". The controller manager is in system:masters too: it runs every
  // controller under its own identity (--use-service-account-credentials=false), and for a local
  // harness full rights are simpler than assembling the union of the controllers' roles.
  await writeFile(
    tokenFile,
    `${adminToken},vmop-admin,vmop-admin,"system:masters"\n` +
      `${controllerManagerToken},system:kube-controller-manager,kube-controller-manager,"system:masters"\n`,
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
    adminToken,
    controllerManagerToken,
    tokenFile,
    serviceAccountKey,
    serviceAccountPublicKey,
    // kube-apiserver writes its self-signed serving certificate (with its CA) here on first start.
    apiserverCert: path.join(dir, 'apiserver-certs', 'apiserver.crt'),
    controllerManagerKubeconfig: path.join(dir, 'controller-manager.kubeconfig'),
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

function apiserverArgs(ports: Ports, files: CredentialFiles): string[] {
  return [
    `--etcd-servers=http://127.0.0.1:${ports.etcdClient}`,
    '--bind-address=127.0.0.1',
    '--advertise-address=127.0.0.1',
    `--secure-port=${ports.apiserver}`,
    `--cert-dir=${path.dirname(files.apiserverCert)}`,
    `--token-auth-file=${files.tokenFile}`,
    '--authorization-mode=RBAC',
    `--service-account-key-file=${files.serviceAccountPublicKey}`,
    `--service-account-signing-key-file=${files.serviceAccountKey}`,
    `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
    // Without it, pods need their service account to exist before they can be created.
    '--disable-admission-plugins=ServiceAccount',
    '--service-cluster-ip-range=10.0.0.0/24',
    '--allow-privileged=true',
  ];
}

function controllerManagerArgs(dir: string, ports: Ports, files: CredentialFiles): string[] {
  return [
    `--kubeconfig=${files.controllerManagerKubeconfig}`,
    `--authentication-kubeconfig=${files.controllerManagerKubeconfig}`,
    `--authorization-kubeconfig=${files.controllerManagerKubeconfig}`,
    '--bind-address=127.0.0.1',
    `--secure-port=${ports.controllerManager}`,
    `--cert-dir=${path.join(dir, 'controller-manager-certs')}`,
    '--leader-elect=false',
    // Every default controller: statefulset, garbagecollector, namespace, pvc-protection, serviceaccount…
    '--controllers=*',
    `--service-account-private-key-file=${files.serviceAccountKey}`,
    `--root-ca-file=${files.apiserverCert}`,
    '--use-service-account-credentials=false',
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

async function distinctFreePorts(): Promise<Ports> {
  const ports = new Set<number>();
  while (ports.size < 4) ports.add(await freePort());
  const [etcdClient, etcdPeer, apiserver, controllerManager] = [...ports] as [number, number, number, number];
  return { etcdClient, etcdPeer, apiserver, controllerManager };
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
