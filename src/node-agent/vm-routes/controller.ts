// Keeps this node's network as planNodeNetwork says: watches the runner pods and the VMs (their
// status says where each guest runs) and, on every change, makes the missing taps and sets the
// routes. Changes are applied one pass at a time; a change during a pass runs another.
import { CoreV1Api, CustomObjectsApi, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { GROUP, PLURAL, VERSION } from '../../api/virtual-machine.js';
import { watchObjects } from '../../kube/watch.js';
import { LABEL_COMPONENT } from '../../reconcilers/virtual-machine/naming.js';
import { RUNNER_COMPONENT } from '../../reconcilers/virtual-machine/runner-pod/pod.js';
import type { Logger } from '../../util/logger.js';
import {
  keepMasqueradeOff,
  processOfPod,
  removeVmRoute,
  replaceVmRoute,
  setUpPodTap,
  vmRoutes,
} from './linux.js';
import { planNodeNetwork, routeChanges, type VmView } from './plan.js';

/** A pass also runs this often without a change: routes someone removed come back. */
const RESYNC_MS = 30_000;

export interface VmRouteController {
  stop(): Promise<void>;
}

export async function runVmRouteController(options: {
  kubeConfig: KubeConfig;
  node: string;
  /** The VM subnets: pods' traffic to them is not masqueraded (keepMasqueradeOff). */
  vmCidrs: readonly string[];
  logger: Logger;
}): Promise<VmRouteController> {
  const { kubeConfig, node, vmCidrs } = options;
  const logger = options.logger.child({ part: 'vm-routes' });
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const custom = kubeConfig.makeApiClient(CustomObjectsApi);
  const labelSelector = `${LABEL_COMPONENT}=${RUNNER_COMPONENT}`;
  let pass: Promise<void> | undefined;
  let again = false;
  /** The pods whose tap is made (by uid): a pod's network namespace keeps it until the pod goes. */
  const tapsMade = new Set<string>();

  const syncOnce = async () => {
    await keepMasqueradeOff(vmCidrs);
    const plan = planNodeNetwork(node, pods.list(), vms.list());
    for (const tap of plan.taps) {
      if (tapsMade.has(tap.uid)) continue;
      const pid = await processOfPod(tap.uid);
      if (!pid) continue; // its sandbox is not there yet: a later pass
      try {
        await setUpPodTap(pid, tap.nic);
        tapsMade.add(tap.uid);
        logger.info(
          { pod: `${tap.namespace}/${tap.name}`, address: tap.nic.address },
          'made the VM tap in its pod',
        );
      } catch (err) {
        logger.warn({ err, pod: `${tap.namespace}/${tap.name}` }, 'could not make the VM tap in its pod');
      }
    }
    const live = new Set(plan.taps.map((tap) => tap.uid));
    for (const uid of tapsMade) if (!live.has(uid)) tapsMade.delete(uid);
    const changes = routeChanges(await vmRoutes(), plan.routes);
    for (const [address, via] of changes.replace) {
      await replaceVmRoute(address, via).then(
        () => logger.info({ address, via }, 'VM route set'),
        (err: unknown) => logger.warn({ err, address, via }, 'could not set a VM route'),
      );
    }
    for (const address of changes.remove) {
      await removeVmRoute(address).then(
        () => logger.info({ address }, 'VM route removed'),
        (err: unknown) => logger.warn({ err, address }, 'could not remove a VM route'),
      );
    }
  };
  const sync = () => {
    if (pass) {
      again = true;
      return;
    }
    pass = (async () => {
      do {
        again = false;
        await syncOnce().catch((err: unknown) => logger.warn({ err }, 'VM network pass failed'));
      } while (again);
    })().finally(() => (pass = undefined));
  };

  const pods = watchObjects<V1Pod>(
    kubeConfig,
    {
      path: '/api/v1/pods',
      list: () => core.listPodForAllNamespaces({ labelSelector }),
      labelSelector,
    },
    { upsert: sync, deleted: sync },
    logger,
  );
  const vmPath = `/apis/${GROUP}/${VERSION}/${PLURAL}`;
  const vms = watchObjects<VmView & { apiVersion?: string; kind?: string }>(
    kubeConfig,
    {
      path: vmPath,
      list: () => custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL }) as never,
    },
    { upsert: sync, deleted: sync },
    logger,
  );
  await Promise.all([pods.start(), vms.start()]);
  logger.info({ node }, "routing the VMs' own addresses");
  sync();
  const timer = setInterval(sync, RESYNC_MS);
  return {
    async stop() {
      clearInterval(timer);
      await Promise.all([pods.stop(), vms.stop()]);
      await pass;
    },
  };
}
