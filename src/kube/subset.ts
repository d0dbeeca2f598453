/**
 * True when every field `desired` sets has the same value in `actual`. Fields the apiserver adds
 * (defaults, managedFields, status) do not count, so "desired ⊆ actual" means "nothing to write".
 */
export function isSubset(desired: unknown, actual: unknown): boolean {
  if (desired === undefined) return true;
  if (Array.isArray(desired)) {
    if (desired.length === 0) return actual === undefined || (Array.isArray(actual) && actual.length === 0);
    return (
      Array.isArray(actual) &&
      actual.length === desired.length &&
      desired.every((item, index) => isSubset(item, actual[index]))
    );
  }
  if (desired !== null && typeof desired === 'object') {
    const entries = Object.entries(desired);
    if (entries.length === 0) return actual === undefined || (typeof actual === 'object' && actual !== null);
    if (actual === null || typeof actual !== 'object') return false;
    return entries.every(([key, value]) => isSubset(value, (actual as Record<string, unknown>)[key]));
  }
  return desired === actual;
}
