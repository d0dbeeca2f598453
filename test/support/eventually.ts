/**
 * Polls `probe` until it returns a value without throwing; rethrows its last error after timeoutMs.
 * The timeout only keeps a broken test from hanging: no test asserts how fast anything is.
 */
export async function eventually<T>(
  probe: () => Promise<T> | T,
  timeoutMs = 60_000,
  intervalMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await probe();
    } catch (err) {
      if (Date.now() > deadline) throw err;
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
