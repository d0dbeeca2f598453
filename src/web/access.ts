// Who sees what, and may do what, in the GUI: VM-Operator's grants from the cached VMs and pools,
// joined with RBAC (rbac.ts). Reads the manager's watch cache; asks the apiserver only RBAC.
import type { KubernetesObject, V1Node } from '@kubernetes/client-node';
import { KIND, VirtualMachine } from '../api/virtual-machine.js';
import { POOL_KIND, VmPool } from '../api/vm-pool.js';
import { SNAPSHOT_KIND, VirtualMachineSnapshot } from '../api/virtual-machine-snapshot.js';
import { IMAGE_KIND, IMAGE_PLURAL, VirtualMachineImage } from '../api/virtual-machine-image.js';
import { imageView, type ImageView } from './image-view.js';
import type { ObjectCache } from '../kube/object-cache.js';
import { ACTIONS, granted, grantedOnVm, rbacRequestOf, type Action } from './permissions.js';
import type { RbacCheck } from './rbac.js';
import type { Person } from './sessions.js';
import { nodeViews, poolView, vmView, type NodeView, type PoolView, type VmView } from './views.js';

const made = (object: { metadata: { creationTimestamp?: string | Date } }) =>
  new Date(object.metadata.creationTimestamp ?? 0).getTime();

export function createAccess(cache: ObjectCache, rbac: RbacCheck) {
  const pool = (namespace: string, name: string) => {
    const cached = cache.get<KubernetesObject>(POOL_KIND, namespace, name);
    return cached ? VmPool.safeParse(cached).data : undefined;
  };
  // A watch replaces a cached object when it changes, never edits it: each is parsed once.
  const parsed = new WeakMap<KubernetesObject, VirtualMachine | null>();
  const parseVm = (cached: KubernetesObject): VirtualMachine | undefined => {
    let known = parsed.get(cached);
    if (known === undefined) parsed.set(cached, (known = VirtualMachine.safeParse(cached).data ?? null));
    return known ?? undefined;
  };
  const vm = (namespace: string, name: string) => {
    const cached = cache.get<KubernetesObject>(KIND, namespace, name);
    return cached ? parseVm(cached) : undefined;
  };
  const allVms = () => cache.list<KubernetesObject>(KIND, undefined).flatMap((o) => parseVm(o) ?? []);
  const allPools = () =>
    cache.list<KubernetesObject>(POOL_KIND, undefined).flatMap((o) => VmPool.safeParse(o).data ?? []);

  /** What RBAC lets the person do in a namespace (or with one object of it). */
  async function rbacActions(person: Person, namespace: string, name?: string): Promise<Set<Action>> {
    const allowed = await Promise.all(
      ACTIONS.map((action) => rbac(person, { namespace, ...rbacRequestOf(action), ...(name && { name }) })),
    );
    return new Set(ACTIONS.filter((_, i) => allowed[i]));
  }

  /** What the person may do with the VM, and whether they see it at all. */
  async function onVm(person: Person, target: VirtualMachine, exact = false) {
    const namespace = target.metadata.namespace!;
    const actions = grantedOnVm(person, target, (name) => pool(namespace, name));
    const [sees, byRbac] = await Promise.all([
      rbac(person, { namespace, ...rbacRequestOf('see'), ...(exact && { name: target.metadata.name }) }),
      rbacActions(person, namespace, exact ? target.metadata.name : undefined),
    ]);
    for (const action of byRbac) actions.add(action);
    return { visible: sees || actions.size > 0, actions };
  }

  async function onPool(person: Person, target: VmPool) {
    const actions = granted(person, target.spec.permissions);
    const sees = await rbac(person, {
      namespace: target.metadata.namespace!,
      verb: 'get',
      resource: 'vmpools',
    });
    return { visible: sees || actions.size > 0, actions };
  }

  return {
    vm,
    pool,
    /** The snapshots of a VM (its name in their spec), newest first. */
    snapshotsOf(namespace: string, vmName: string): VirtualMachineSnapshot[] {
      return cache
        .list<KubernetesObject>(SNAPSHOT_KIND, namespace)
        .flatMap((o) => VirtualMachineSnapshot.safeParse(o).data ?? [])
        .filter((snapshot) => snapshot.spec.virtualMachineName === vmName)
        .sort((a, b) => made(b) - made(a));
    },
    /** The person's view of one VM, undefined when they may not see it. */
    async vmView(person: Person, namespace: string, name: string): Promise<VmView | undefined> {
      const target = vm(namespace, name);
      if (!target) return undefined;
      const { visible, actions } = await onVm(person, target);
      return visible ? vmView(target, actions) : undefined;
    },
    async vmViews(person: Person): Promise<VmView[]> {
      const views = await Promise.all(
        allVms().map(async (target) => {
          const { visible, actions } = await onVm(person, target);
          return visible ? [vmView(target, actions)] : [];
        }),
      );
      return views.flat();
    },
    async poolViews(person: Person): Promise<PoolView[]> {
      const vms = allVms();
      const views = await Promise.all(
        allPools().map(async (target) => {
          const { visible, actions } = await onPool(person, target);
          const members = vms.filter(
            (v) =>
              v.metadata.namespace === target.metadata.namespace &&
              v.spec.pools.includes(target.metadata.name),
          );
          return visible ? [poolView(target, members, person.user, actions)] : [];
        }),
      );
      return views.flat();
    },
    /** Whether the person may do `action` with the VM (asked of RBAC for this very VM too). */
    async mayOnVm(person: Person, target: VirtualMachine, action: Action): Promise<boolean> {
      return (await onVm(person, target, true)).actions.has(action);
    },
    /** Whether the person may see every VM of the cluster (and so the cluster's totals). */
    async seesCluster(person: Person): Promise<boolean> {
      return rbac(person, { namespace: '', ...rbacRequestOf('see'), verb: 'list' });
    },
    /** Whether the person may see the nodes with every VM on them: nodes and VMs of all namespaces. */
    async seesNodes(person: Person): Promise<boolean> {
      const [nodes, vms] = await Promise.all([
        rbac(person, { group: '', namespace: '', verb: 'list', resource: 'nodes' }),
        this.seesCluster(person),
      ]);
      return nodes && vms;
    },
    nodeViews(): NodeView[] {
      return nodeViews(cache.list<V1Node>('Node', undefined), allVms());
    },
    async mayUsePool(person: Person, target: VmPool): Promise<boolean> {
      return (await onPool(person, target)).visible;
    },
    /** Whether RBAC lets the person create VMs in `namespace`. */
    mayCreateVm(person: Person, namespace: string): Promise<boolean> {
      return rbac(person, { namespace, verb: 'create', resource: 'vms' });
    },
    /** Of `namespaces`, those the person may create VMs in (one question when it is all of them). */
    async namespacesToCreateIn(person: Person, namespaces: string[]): Promise<string[]> {
      if (await this.mayCreateVm(person, '')) return namespaces;
      const allowed = await Promise.all(namespaces.map((namespace) => this.mayCreateVm(person, namespace)));
      return namespaces.filter((_, i) => allowed[i]);
    },
    /** Of `namespaces`, those whose VirtualMachineImages RBAC lets the person list (one question for all). */
    async namespacesSeeingImages(person: Person, namespaces: string[]): Promise<string[]> {
      const lists = (namespace: string) => rbac(person, { namespace, verb: 'list', resource: IMAGE_PLURAL });
      if (await lists('')) return namespaces;
      const allowed = await Promise.all(namespaces.map(lists));
      return namespaces.filter((_, i) => allowed[i]);
    },
    /** Whether RBAC lets the person create VirtualMachineImages in `namespace` (and so upload into one). */
    mayCreateImage(person: Person, namespace: string): Promise<boolean> {
      return rbac(person, { namespace, verb: 'create', resource: IMAGE_PLURAL });
    },
    /** Of `namespaces`, those the person may upload images into. */
    async namespacesToUploadIn(person: Person, namespaces: string[]): Promise<string[]> {
      if (await this.mayCreateImage(person, '')) return namespaces;
      const allowed = await Promise.all(
        namespaces.map((namespace) => this.mayCreateImage(person, namespace)),
      );
      return namespaces.filter((_, i) => allowed[i]);
    },
    /** The VirtualMachineImage, as cached. */
    image(namespace: string, name: string): VirtualMachineImage | undefined {
      return VirtualMachineImage.safeParse(cache.get<KubernetesObject>(IMAGE_KIND, namespace, name)).data;
    },
    /** The VirtualMachineImages of these namespaces, by namespace and name. */
    images(namespaces: string[]): ImageView[] {
      return namespaces
        .flatMap((namespace) => cache.list<KubernetesObject>(IMAGE_KIND, namespace))
        .flatMap((cached) => VirtualMachineImage.safeParse(cached).data ?? [])
        .map(imageView)
        .sort((a, b) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name));
    },
    /** The names of the VirtualMachineImages of a namespace that are Ready (a new VM's disk may copy one). */
    readyImages(namespace: string): string[] {
      return cache
        .list<KubernetesObject & { status?: { phase?: string } }>(IMAGE_KIND, namespace)
        .filter((image) => image.status?.phase === 'Ready')
        .map((image) => image.metadata!.name!)
        .sort();
    },
  };
}
export type Access = ReturnType<typeof createAccess>;
