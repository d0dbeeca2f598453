// A real Prometheus (Debian's package) on a bed's node: in that node's network namespace it reaches
// the pods of every node and the managers on the host's address, as one in the cluster would. It
// finds runner pods the way a plain Prometheus does, by the pods' prometheus.io annotations (which
// vmop sets) in the classic relabelling, and scrapes the managers it is told of.
//
// Debian builds Prometheus without Kubernetes service discovery, so a stand-in serves the pods
// over Prometheus' HTTP discovery with the labels kubernetes_sd_configs (role: pod) gives them
// (__meta_kubernetes_pod_annotation_…, one target per container port): what Prometheus does with
// them, the relabelling and the scrape, is its own.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { CoreV1Api, KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { freePort } from '../../src/util/free-port.js';
import { eventually } from './eventually.js';

const run = promisify(execFile);
/** Short, so a test sees a change within seconds. */
const SCRAPE_INTERVAL = '2s';

export interface Prometheus {
  url: string;
  /** The samples of an instant query, as { labels, value }. */
  query(expr: string): Promise<Array<{ labels: Record<string, string>; value: number }>>;
  /** The single value of an instant query (undefined when it has none). */
  value(expr: string): Promise<number | undefined>;
  stop(): Promise<void>;
}

/** Prometheus' name of a pod's meta label for `name` (its characters outside [a-zA-Z0-9_] as _). */
const metaName = (prefix: string, name: string) => `${prefix}${name.replace(/[^a-zA-Z0-9_]/g, '_')}`;

/** The target groups kubernetes_sd_configs (role: pod) makes of `pods` (running ones with an address). */
export function podTargetGroups(pods: V1Pod[]) {
  return pods
    .filter((pod) => pod.status?.podIP && pod.status.phase === 'Running')
    .flatMap((pod) => {
      const labels: Record<string, string> = {
        __meta_kubernetes_namespace: pod.metadata!.namespace!,
        __meta_kubernetes_pod_name: pod.metadata!.name!,
        __meta_kubernetes_pod_node_name: pod.spec?.nodeName ?? '',
        __meta_kubernetes_pod_ip: pod.status!.podIP!,
        __meta_kubernetes_pod_phase: pod.status!.phase!,
      };
      for (const [name, value] of Object.entries(pod.metadata?.annotations ?? {})) {
        labels[metaName('__meta_kubernetes_pod_annotation_', name)] = value;
        labels[metaName('__meta_kubernetes_pod_annotationpresent_', name)] = 'true';
      }
      const ports = (pod.spec?.containers ?? []).flatMap((c) => c.ports ?? []);
      return ports.length === 0
        ? [{ targets: [pod.status!.podIP!], labels }]
        : ports.map((port) => ({
            targets: [`${pod.status!.podIP}:${port.containerPort}`],
            labels: { ...labels, __meta_kubernetes_pod_container_port_name: port.name ?? '' },
          }));
    });
}

/** The pods of the cluster as target groups, over HTTP on `host` (Prometheus' http_sd_configs). */
async function servePodDiscovery(kubeconfig: string, host: string) {
  const config = new KubeConfig();
  config.loadFromFile(kubeconfig);
  const core = config.makeApiClient(CoreV1Api);
  const server = http.createServer((_request, response) => {
    core.listPodForAllNamespaces().then(
      (pods) =>
        response
          .writeHead(200, { 'Content-Type': 'application/json' })
          .end(JSON.stringify(podTargetGroups(pods.items))),
      (err: unknown) => response.writeHead(500).end(String(err)),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return {
    url: `http://${host}:${(server.address() as AddressInfo).port}/`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The classic annotation-driven pod job (what Prometheus' own Kubernetes example configures). */
function annotatedPodsJob(discoveryUrl: string) {
  return {
    job_name: 'kubernetes-pods',
    // The runner names its VM's namespace, name and node itself.
    honor_labels: true,
    http_sd_configs: [{ url: discoveryUrl, refresh_interval: SCRAPE_INTERVAL }],
    relabel_configs: [
      {
        source_labels: ['__meta_kubernetes_pod_annotation_prometheus_io_scrape'],
        action: 'keep',
        regex: 'true',
      },
      {
        source_labels: ['__meta_kubernetes_pod_annotation_prometheus_io_path'],
        target_label: '__metrics_path__',
        regex: '(.+)',
      },
      {
        source_labels: ['__address__', '__meta_kubernetes_pod_annotation_prometheus_io_port'],
        regex: '([^:]+)(?::\\d+)?;(\\d+)',
        replacement: '$1:$2',
        target_label: '__address__',
      },
      { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
    ],
  };
}

export async function startPrometheus(options: {
  /** The node's network namespace (a path for nsenter --net=). */
  netns: string;
  kubeconfig: string;
  /** The managers' /metrics URLs. */
  managers: string[];
}): Promise<Prometheus> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-prometheus-'));
  // The apiserver listens on the host's address on the node network: the discovery does too.
  const kubeconfig = new KubeConfig();
  kubeconfig.loadFromFile(options.kubeconfig);
  const discovery = await servePodDiscovery(
    options.kubeconfig,
    new URL(kubeconfig.getCurrentCluster()!.server).hostname,
  );
  const { stdout } = await run('nsenter', [
    `--net=${options.netns}`,
    'ip',
    '-4',
    '-o',
    'addr',
    'show',
    'eth0',
  ]);
  const address = /inet (\d+\.\d+\.\d+\.\d+)\//.exec(stdout)![1]!;
  const port = await freePort();
  const config = {
    global: { scrape_interval: SCRAPE_INTERVAL, evaluation_interval: SCRAPE_INTERVAL },
    scrape_configs: [
      {
        job_name: 'vmop-managers',
        static_configs: [{ targets: options.managers.map((url) => new URL(url).host) }],
      },
      annotatedPodsJob(discovery.url),
    ],
  };
  await writeFile(path.join(dir, 'prometheus.yml'), stringify(config));
  const child: ChildProcess = spawn(
    'nsenter',
    [
      `--net=${options.netns}`,
      '--',
      'prometheus',
      `--config.file=${path.join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=${address}:${port}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (log = (log + chunk).slice(-20_000)));
  const url = `http://${address}:${port}`;
  await eventually(async () => {
    if (child.exitCode !== null) throw new Error(`prometheus exited ${child.exitCode}:\n${log}`);
    const response = await fetch(`${url}/-/ready`);
    if (!response.ok) throw new Error(`prometheus not ready: ${response.status}`);
  }, 60_000);

  const query = async (expr: string) => {
    const response = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
    const body = (await response.json()) as {
      status: string;
      error?: string;
      data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> };
    };
    if (body.status !== 'success') throw new Error(`query ${expr}: ${body.error}`);
    return body.data.result.map((sample) => ({ labels: sample.metric, value: Number(sample.value[1]) }));
  };
  return {
    url,
    query,
    async value(expr) {
      const samples = await query(expr);
      if (samples.length > 1) throw new Error(`query ${expr} has ${samples.length} samples`);
      return samples[0]?.value;
    },
    async stop() {
      child.kill('SIGTERM');
      if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve));
      await discovery.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
