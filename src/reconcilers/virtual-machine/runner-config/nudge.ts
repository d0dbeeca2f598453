// When to annotate the runner pod so kubelet refreshes its config volume at once. Pure.
//
// kubelet refreshes a changed ConfigMap or Secret volume only on its periodic pod sync (about a
// minute); an update of the pod makes it sync at once (VM-Operator's `cmVersion` annotation). But
// kubelet may handle the pod update before its own ConfigMap cache has the new version, and then
// writes the old file again. The runner reports the digest of the config it has, so a nudge that
// came too early is repeated, with backoff, until the runner has the config or the tries run out.
import type { V1Pod } from '@kubernetes/client-node';
import type { RunnerSnapshot } from '../../../api/runner-snapshot.js';
import { CONFIG_VERSION_ANNOTATION, NUDGED_AT_ANNOTATION } from '../naming.js';

/** Repeated nudges after the first, at 2, 4, 8, 16, 32 s: then the periodic sync is as near. */
export const MAX_RENUDGES = 5;
const FIRST_RETRY_MS = 2_000;

export interface NudgeInput {
  pod: V1Pod | undefined;
  /** The versions of what the runner reads from volumes: `<ConfigMap rv>[/<display Secret rv>]`. */
  configVersion: string;
  /** The digest of the config.yaml the runner should have. */
  configDigest: string;
  snapshot: RunnerSnapshot | undefined;
  now: Date;
}

export interface NudgeDecision {
  /** Annotations to merge into the pod, when it needs a nudge now. */
  annotations?: Record<string, string>;
  /** Look again then (the runner has not reported the config yet). */
  retryAfterMs?: number;
}

/** `<version>` or `<version>#<n>`: the version nudged for, and how often it was nudged again. */
function parseNudged(value: string | undefined): { version?: string; renudges: number } {
  if (!value) return { renudges: 0 };
  const match = /^(.*)#(\d+)$/.exec(value);
  return match ? { version: match[1], renudges: Number(match[2]) } : { version: value, renudges: 0 };
}

export function nudgeDecision(input: NudgeInput): NudgeDecision {
  const { pod, configVersion, snapshot, now } = input;
  if (!pod?.metadata || pod.metadata.deletionTimestamp || pod.status?.phase !== 'Running') return {};
  const annotations = pod.metadata.annotations ?? {};
  const nudged = parseNudged(annotations[CONFIG_VERSION_ANNOTATION]);
  const nudge = (value: string, retryAfterMs: number): NudgeDecision => ({
    annotations: { [CONFIG_VERSION_ANNOTATION]: value, [NUDGED_AT_ANNOTATION]: now.toISOString() },
    retryAfterMs,
  });
  if (nudged.version !== configVersion) return nudge(configVersion, FIRST_RETRY_MS);

  // This pod's runner, up and reporting, with another config than the one it should have?
  const reported =
    snapshot !== undefined &&
    snapshot.podUid === pod.metadata.uid &&
    (snapshot.phase === 'booting' || snapshot.phase === 'running')
      ? snapshot.config
      : undefined;
  if (reported === undefined || reported === input.configDigest) return {};
  if (nudged.renudges >= MAX_RENUDGES) return {};
  const waitMs = FIRST_RETRY_MS * 2 ** nudged.renudges;
  const nudgedAt = Date.parse(annotations[NUDGED_AT_ANNOTATION] ?? '');
  const dueInMs = Number.isNaN(nudgedAt) ? 0 : nudgedAt + waitMs - now.getTime();
  if (dueInMs > 0) return { retryAfterMs: dueInMs };
  return nudge(`${configVersion}#${nudged.renudges + 1}`, FIRST_RETRY_MS * 2 ** (nudged.renudges + 1));
}
