// Which cached objects carry a label value, per namespace, kept up to date from a watch's events.
// A reconcile asks for one VM's pods, claims and Secrets; scanning the namespace instead costs
// every reconcile time in proportion to the namespace's objects (8.7% of a manager's CPU with 400
// VMs in one namespace, and growing with each VM: bench:status).
import type { KubernetesObject } from '@kubernetes/client-node';

export class LabelIndex {
  /** `<label>=<value>` in a namespace → the names of the objects with it. */
  private readonly names = new Map<string, Set<string>>();
  /** An object (namespace, name) → the entries it is in, to leave them when its labels change. */
  private readonly entriesOf = new Map<string, string[]>();

  constructor(private readonly labelKeys: readonly string[]) {}

  upsert(object: KubernetesObject): void {
    this.delete(object);
    const { namespace = '', name, labels = {} } = object.metadata ?? {};
    if (name === undefined) return;
    const entries = this.labelKeys.flatMap((label) =>
      labels[label] === undefined ? [] : [entryKey(namespace, label, labels[label])],
    );
    if (entries.length === 0) return;
    this.entriesOf.set(objectKey(namespace, name), entries);
    for (const entry of entries) {
      const names = this.names.get(entry) ?? new Set<string>();
      this.names.set(entry, names);
      names.add(name);
    }
  }

  delete(object: KubernetesObject): void {
    const { namespace = '', name } = object.metadata ?? {};
    if (name === undefined) return;
    const key = objectKey(namespace, name);
    for (const entry of this.entriesOf.get(key) ?? []) {
      const names = this.names.get(entry)!;
      names.delete(name);
      if (names.size === 0) this.names.delete(entry);
    }
    this.entriesOf.delete(key);
  }

  /**
   * The names of a namespace's objects that carry the first indexed label of `labels` with its
   * value (a superset of those with all of `labels`), or undefined when `labels` names no indexed
   * label and only a scan can tell.
   */
  candidates(namespace: string, labels: Record<string, string>): ReadonlySet<string> | undefined {
    const label = this.labelKeys.find((key) => labels[key] !== undefined);
    if (label === undefined) return undefined;
    return this.names.get(entryKey(namespace, label, labels[label]!)) ?? new Set();
  }
}

const objectKey = (namespace: string, name: string) => `${namespace}/${name}`;
const entryKey = (namespace: string, label: string, value: string) => `${namespace}\0${label}=${value}`;
