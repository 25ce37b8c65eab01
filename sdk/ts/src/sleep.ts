// sleep is shared by the client's retries and heartbeats (index.ts) and the worker loop
// (worker.ts); it is not part of the SDK's API.

/** sleep resolves after ms, or as soon as one of the signals is aborted. */
export function sleep(ms: number, ...signals: AbortSignal[]): Promise<void> {
  return new Promise((resolve) => {
    if (signals.some((s) => s.aborted)) return resolve();
    const finish = () => {
      clearTimeout(timer);
      for (const s of signals) s.removeEventListener("abort", finish);
      resolve();
    };
    const timer = setTimeout(finish, ms);
    for (const s of signals) s.addEventListener("abort", finish, { once: true });
  });
}
