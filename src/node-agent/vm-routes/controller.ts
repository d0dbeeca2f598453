// Keeps this node's network as planNodeNetwork says: watches the runner pods, the VMs (their
// status says where each guest runs), and the leases and claims (which VM holds which address)
// and, on every change, makes the missing taps and sets the routes. Changes are applied one pass
// at a time; a change during a pass runs another.
import { CoreV1Api, CustomObjectsApi, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { GROUP, PLURAL, VERSION } from '../../api/virtual-machine.js';
import { IP_ADDRESS_PLURAL, LEASE_PLURAL } from '../../api/virtual-machine-ip-address.js';
import { parseSubnet, type Subnet } from '../../reconcilers/virtual-machine-ip-address/subnets.js';
import { watchObjects } from '../../kube/watch.js';
import { LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY } from '../../reconcilers/virtual-machine/naming.js';
import { RUNNER_COMPONENT } from '../../reconcilers/virtual-machine/runner-pod/pod.js';
import type { Logger } from '../../util/logger.js';
import {
  keepMasqueradeOff,
  processOfPod,
  qemuOfPod,
  qemuRuns,
  removeVmRoute,
  replaceVmRoute,
  sendNoRedirects,
  setUpPodTap,
  tapPacketsFromGuest,
  vmRoutes,
} from './linux.js';
import { leasedAddresses, type ClaimView, type LeaseView } from './leased-addresses.js';
import { planNodeNetwork, routeChanges, type NodeNetworkPlan, type VmView } from './plan.js';

/** A pass also runs this often without a change: routes someone removed come back. */
const RESYNC_MS = 30_000;
/** How often the pods of a moving VM on this node are looked at for the handover. */
const HANDOVER_CHECK_MS = 20;

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
  // The CLI checked their form; a subnet that is no subnet's start holds no VM's address.
  const subnets = vmCidrs.map(parseSubnet).filter((subnet): subnet is Subnet => typeof subnet !== 'string');
  const logger = options.logger.child({ part: 'vm-routes' });
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const custom = kubeConfig.makeApiClient(CustomObjectsApi);
  // Labels the chart's admission policy keeps for the manager (owned-labels-policy.yaml): a
  // tenant's pods labelled as runners' are not listed, so they cannot fill this cache.
  const labelSelector = `${LABEL_COMPONENT}=${RUNNER_COMPONENT},${LABEL_MANAGED_BY}=${MANAGED_BY}`;
  let pass: Promise<void> | undefined;
  let again = false;
  /** The pods whose tap is made, by uid, with a process of each (its network namespace's way in). */
  const tapsMade = new Map<string, number>();
  /**
   * What the handover checks saw (plan.ts), by pod uid, until the status names the pod the guest
   * went to; a source's QEMU process (0: none found); what a target's guest had sent on its tap
   * when its VM was first seen moving (a target whose guest runs sends more).
   */
  const handover = { runsIn: new Set<string>(), leftFrom: new Set<string>() };
  const qemuOf = new Map<string, number>();
  const sentBefore = new Map<string, number>();
  let moving: NodeNetworkPlan['moving'] = [];
  /**
   * Whether the next pass reads the node's rules and routes (the first and each resync); other
   * passes (every VM status change, handovers) trust what this agent last read and changed, so
   * they run no process unless a route changes.
   */
  let checkRules = true;
  let applied: Map<string, string> | undefined;

  const syncOnce = async () => {
    const resync = checkRules;
    if (checkRules) {
      checkRules = false;
      await keepMasqueradeOff(vmCidrs);
      await sendNoRedirects();
    }
    const addresses = leasedAddresses(leases.list(), claims.list(), subnets);
    const plan = planNodeNetwork(node, pods.list(), vms.list(), addresses, handover);
    moving = plan.moving;
    // A pod the status names has what a handover was for: it is no target any more.
    for (const uid of plan.named) {
      handover.runsIn.delete(uid);
      sentBefore.delete(uid);
    }
    for (const tap of plan.taps) {
      if (tapsMade.has(tap.uid)) continue;
      const pid = await processOfPod(tap.uid);
      if (!pid) continue; // its sandbox is not there yet: a later pass
      try {
        await setUpPodTap(pid, tap.nic);
        tapsMade.set(tap.uid, pid);
        logger.info(
          { pod: `${tap.namespace}/${tap.name}`, address: tap.nic.address },
          'made the VM tap in its pod',
        );
      } catch (err) {
        logger.warn({ err, pod: `${tap.namespace}/${tap.name}` }, 'could not make the VM tap in its pod');
      }
    }
    const live = new Set(plan.taps.map((tap) => tap.uid));
    for (const seen of [tapsMade, qemuOf, sentBefore, handover.runsIn, handover.leftFrom])
      for (const uid of seen.keys()) if (!live.has(uid)) seen.delete(uid);
    const current = resync || !applied ? await vmRoutes() : applied;
    const changes = routeChanges(current, plan.routes);
    const now = new Map(current);
    let failed = false;
    for (const [address, via] of changes.replace) {
      await replaceVmRoute(address, via).then(
        () => {
          now.set(address, via);
          logger.info({ address, via }, 'VM route set');
        },
        (err: unknown) => {
          failed = true;
          logger.warn({ err, address, via }, 'could not set a VM route');
        },
      );
    }
    for (const address of changes.remove) {
      await removeVmRoute(address).then(
        () => {
          now.delete(address);
          logger.info({ address }, 'VM route removed');
        },
        (err: unknown) => {
          failed = true;
          logger.warn({ err, address }, 'could not remove a VM route');
        },
      );
    }
    // After a failure the kernel is read again next time.
    applied = failed ? undefined : now;
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

  /** The handover (plan.ts): the guest sent on a local target's tap, or a local source's QEMU ended. */
  let checking = false;
  const checkHandovers = async () => {
    if (checking || moving.length === 0) return;
    checking = true;
    try {
      let seen = false;
      for (const { named, other, namedIsLocal, otherIsLocal } of moving) {
        const pid = tapsMade.get(other.uid);
        if (otherIsLocal && pid && !handover.runsIn.has(other.uid)) {
          const sent = await tapPacketsFromGuest(pid);
          if (!sentBefore.has(other.uid)) sentBefore.set(other.uid, sent);
          else if (sent > sentBefore.get(other.uid)!) {
            handover.runsIn.add(other.uid);
            seen = true;
          }
        }
        if (namedIsLocal && !handover.leftFrom.has(named.uid)) {
          if (!qemuOf.has(named.uid)) qemuOf.set(named.uid, (await qemuOfPod(named.uid)) ?? 0);
          const qemu = qemuOf.get(named.uid)!;
          if (qemu && !(await qemuRuns(qemu))) {
            handover.leftFrom.add(named.uid);
            seen = true;
          }
        }
      }
      if (seen) {
        logger.info(
          { pods: moving.map((m) => m.other.name) },
          'a moving VM was handed over: its routes switch',
        );
        sync();
      }
    } finally {
      checking = false;
    }
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
  /** Every object of one of vmop's kinds, cluster-wide. */
  const watchAll = <T>(plural: string) =>
    watchObjects<T & { apiVersion?: string; kind?: string }>(
      kubeConfig,
      {
        path: `/apis/${GROUP}/${VERSION}/${plural}`,
        list: () => custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural }) as never,
      },
      { upsert: sync, deleted: sync },
      logger,
    );
  const vms = watchAll<VmView>(PLURAL);
  const leases = watchAll<LeaseView>(LEASE_PLURAL);
  const claims = watchAll<ClaimView>(IP_ADDRESS_PLURAL);
  const watches = [pods, vms, leases, claims];
  await Promise.all(watches.map((watch) => watch.start()));
  logger.info({ node }, "routing the VMs' own addresses");
  sync();
  const timer = setInterval(() => {
    checkRules = true;
    sync();
  }, RESYNC_MS);
  const handoverTimer = setInterval(
    () => void checkHandovers().catch((err: unknown) => logger.warn({ err }, 'handover check failed')),
    HANDOVER_CHECK_MS,
  );
  return {
    async stop() {
      clearInterval(timer);
      clearInterval(handoverTimer);
      await Promise.all(watches.map((watch) => watch.stop()));
      await pass;
    },
  };
}
