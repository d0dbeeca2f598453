// Cluster DNS for the local cluster: CoreDNS as a Deployment behind the kube-dns Service, as
// kubeadm installs it, so pods resolve `<service>.<namespace>.svc.cluster.local`.
import type { KubernetesObject } from '@kubernetes/client-node';
import { CLUSTER_DNS_IP } from './control-plane.js';

const NAMESPACE = 'kube-system';
const LABELS = { 'k8s-app': 'kube-dns' };

// No `forward`: this machine has no upstream resolver pods could use, and cluster names are all
// the local cluster needs.
const COREFILE = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loop
    reload
}
`;

export function clusterDnsObjects(image: string): KubernetesObject[] {
  const metadata = { name: 'coredns', namespace: NAMESPACE, labels: LABELS };
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'system:coredns' },
      rules: [
        {
          apiGroups: [''],
          resources: ['endpoints', 'services', 'pods', 'namespaces'],
          verbs: ['list', 'watch'],
        },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
      ],
    } as KubernetesObject,
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:coredns' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:coredns' },
      subjects: [{ kind: 'ServiceAccount', name: 'coredns', namespace: NAMESPACE }],
    } as KubernetesObject,
    { apiVersion: 'v1', kind: 'ConfigMap', metadata, data: { Corefile: COREFILE } } as KubernetesObject,
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata,
      spec: {
        replicas: 1,
        selector: { matchLabels: LABELS },
        template: {
          metadata: { labels: LABELS },
          spec: {
            serviceAccountName: 'coredns',
            priorityClassName: 'system-cluster-critical',
            dnsPolicy: 'Default',
            containers: [
              {
                name: 'coredns',
                image,
                imagePullPolicy: 'IfNotPresent',
                args: ['-conf', '/etc/coredns/Corefile'],
                ports: [
                  { name: 'dns', containerPort: 53, protocol: 'UDP' },
                  { name: 'dns-tcp', containerPort: 53, protocol: 'TCP' },
                ],
                readinessProbe: { httpGet: { path: '/ready', port: 8181 }, periodSeconds: 2 },
                livenessProbe: { httpGet: { path: '/health', port: 8080 } },
                volumeMounts: [{ name: 'config', mountPath: '/etc/coredns', readOnly: true }],
                resources: { requests: { cpu: '50m', memory: '50Mi' }, limits: { memory: '170Mi' } },
              },
            ],
            volumes: [{ name: 'config', configMap: { name: 'coredns' } }],
          },
        },
      },
    } as KubernetesObject,
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'kube-dns', namespace: NAMESPACE, labels: LABELS },
      spec: {
        clusterIP: CLUSTER_DNS_IP,
        selector: LABELS,
        ports: [
          { name: 'dns', port: 53, protocol: 'UDP', targetPort: 53 },
          { name: 'dns-tcp', port: 53, protocol: 'TCP', targetPort: 53 },
        ],
      },
    } as KubernetesObject,
  ];
}
