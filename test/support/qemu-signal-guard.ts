// The e2e suites' guard against a QEMU stopped by a signal no test sent (issue 52): a VM restarted
// under a user's hands once hid as a flake for weeks. After each test, the bed's StoppedByHost Events
// of host-signal stops fail it, naming the VM and QEMU's own line (which says who sent the signal).
// No test signals a QEMU so on purpose, except the one that shows the guard at work (it takes the
// stops the guard found itself).
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';

export interface QemuSignalGuard {
  /** The host-signal stops seen since the last look, one message each. */
  unexpected(): Promise<string[]>;
}

export function qemuSignalGuard(kubeconfig: () => string): QemuSignalGuard {
  /** Event occurrences looked at already: uid and count (a repeated Event counts up). */
  const seen = new Set<string>();
  return {
    async unexpected() {
      const config = new KubeConfig();
      config.loadFromFile(kubeconfig());
      const events = await config
        .makeApiClient(CoreV1Api)
        .listEventForAllNamespaces({ fieldSelector: 'reason=StoppedByHost' });
      const found: string[] = [];
      for (const event of events.items) {
        const occurrence = `${event.metadata?.uid}/${event.count ?? 1}`;
        if (seen.has(occurrence) || !event.message?.includes('host-signal')) continue;
        seen.add(occurrence);
        const vm = `${event.involvedObject.namespace}/${event.involvedObject.name}`;
        found.push(`the QEMU of VM ${vm} was stopped by a signal no test sent: ${event.message}`);
      }
      return found;
    },
  };
}
