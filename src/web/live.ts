// Live views for the GUI: each open page gets its VMs and pools once, then every change of them
// within FLUSH_MS of the watch event (a burst of changes is one message per VM). Any replica can
// serve any page: its own watch cache has every VM.
import { KIND } from '../api/virtual-machine.js';
import { POOL_KIND } from '../api/vm-pool.js';
import type { ChangeListener } from '../operator/watch-edge.js';
import type { Access } from './access.js';
import type { Person } from './sessions.js';
import type { PoolView, VmView } from './views.js';

const FLUSH_MS = 50;

export type LiveMessage =
  | { type: 'vm'; vm: VmView }
  | { type: 'vm-removed'; namespace: string; name: string }
  | { type: 'pools'; pools: PoolView[] };

interface Viewer {
  person: Person;
  send(message: LiveMessage): void;
  /** What this page was last sent, by namespace/name (JSON), to send only changes. */
  vms: Map<string, string>;
  pools: string;
}

export function liveViews(access: Access, subscribe: (listener: ChangeListener) => () => void) {
  const viewers = new Set<Viewer>();
  const dirtyVms = new Set<string>();
  let dirtyPools = false;
  let flushing: NodeJS.Timeout | undefined;

  const unsubscribe = subscribe((kind, namespace, name) => {
    if (kind !== KIND && kind !== POOL_KIND) return;
    if (kind === KIND) dirtyVms.add(`${namespace}/${name}`);
    // A VM's assignment or membership changes its pools' counts.
    if (kind === POOL_KIND || access.vm(namespace, name)?.spec.pools.length !== 0) dirtyPools = true;
    flushing ??= setTimeout(() => void flush(), FLUSH_MS);
  });

  async function flush() {
    const vms = [...dirtyVms];
    const pools = dirtyPools;
    dirtyVms.clear();
    dirtyPools = false;
    flushing = undefined;
    await Promise.all([...viewers].map((viewer) => update(viewer, vms, pools).catch(() => undefined)));
  }

  async function update(viewer: Viewer, vms: string[], pools: boolean) {
    for (const key of vms) {
      const [namespace, name] = key.split('/') as [string, string];
      const view = await access.vmView(viewer.person, namespace, name);
      const json = view && JSON.stringify(view);
      if (json === viewer.vms.get(key)) continue;
      if (view) {
        viewer.vms.set(key, json!);
        viewer.send({ type: 'vm', vm: view });
      } else {
        viewer.vms.delete(key);
        viewer.send({ type: 'vm-removed', namespace, name });
      }
    }
    if (!pools) return;
    const views = await access.poolViews(viewer.person);
    const json = JSON.stringify(views);
    if (json === viewer.pools) return;
    viewer.pools = json;
    viewer.send({ type: 'pools', pools: views });
  }

  return {
    /** The person's VMs and pools now; `send` gets every change from then on until `detach`. */
    async attach(person: Person, send: (message: LiveMessage) => void) {
      const [vms, pools] = await Promise.all([access.vmViews(person), access.poolViews(person)]);
      const viewer: Viewer = {
        person,
        send,
        vms: new Map(vms.map((vm) => [`${vm.namespace}/${vm.name}`, JSON.stringify(vm)])),
        pools: JSON.stringify(pools),
      };
      viewers.add(viewer);
      return { vms, pools, detach: () => viewers.delete(viewer) };
    },
    stop() {
      unsubscribe();
      clearTimeout(flushing);
      viewers.clear();
    },
  };
}
export type LiveViews = ReturnType<typeof liveViews>;
