/** A time as Kubernetes writes it (RFC 3339, whole seconds), e.g. for a condition's lastTransitionTime. */
export function kubeTime(time: Date | string): string {
  return (typeof time === 'string' ? time : time.toISOString()).replace(/\.\d+Z$/, 'Z');
}
