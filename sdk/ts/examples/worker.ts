// A complete ag worker in TypeScript: it runs jobs of kind "ts.sleep" (payload {"ms": N}, or
// {"ms": N, "fail": "why"} to fail), AG_CONCURRENCY of them at once (default 4), and follows
// docs/worker-protocol.md. In your own project, import from "@ag-coord/ag-sdk" instead of
// "../src/index.js".
//
//   AG_SERVER=http://127.0.0.1:7777 AG_TOKEN=<a worker token> AG_WORKER_LABEL=ts-1 \
//     node dist/examples/worker.js
import { setTimeout as delay } from "node:timers/promises";
import { createAgClient, runWorker, type JobClaim, type JsonObject, type WorkerEvent } from "../src/index.js";

const ag = createAgClient(process.env.AG_SERVER ?? "http://127.0.0.1:7777", process.env.AG_TOKEN ?? "");

// Shutdown (SIGTERM, SIGINT): claim nothing more; running jobs have the grace to finish, then
// they are stopped and handed back with a zero retry delay. A job is never left silently claimed.
const shutdown = new AbortController();
for (const sig of ["SIGTERM", "SIGINT"] as const) process.once(sig, () => shutdown.abort());

// The work itself. It must stop soon after signal is aborted: the claim was lost, the job
// cancelled, or the grace of a shutdown ran out.
async function sleepJob(claim: JobClaim, signal: AbortSignal): Promise<JsonObject> {
  const ms = Number(claim.job.payload?.ms ?? 0);
  for (let done = 0; done < ms; done += 100) {
    claim.setProgress(`slept ${done} of ${ms} ms`); // sent with the next heartbeat
    await delay(Math.min(100, ms - done), undefined, { signal });
  }
  if (claim.job.payload?.fail) throw new Error(String(claim.job.payload.fail));
  return { sleptMs: ms };
}

function log(e: WorkerEvent): void {
  if (e.type === "claim failed") {
    console.error(`claim failed, again in ${e.retryMs} ms: ${String(e.error)}`);
    return;
  }
  let what: string = e.type;
  if (e.type === "lost") what = "claim lost; stopped";
  else if (e.type === "refused") what = `report refused, the claim was lost: ${e.error.message}`;
  else if (e.type === "failed" || e.type === "unreported") what = `${e.type}: ${String(e.error)}`;
  console.log(`job ${e.claim.job.id} claim ${e.claim.fencingToken}: ${what}`);
}

// Claims for every free slot in one call, heartbeats each job with its own claim number, and
// reports completions together; it resolves once the shutdown is over and every job reported,
// and rejects when claiming cannot work (a wrong token or role): not ours to fix.
await runWorker(ag, {
  worker: process.env.AG_WORKER_LABEL ?? "ts-worker",
  kinds: ["ts.sleep"],
  concurrency: Number(process.env.AG_CONCURRENCY ?? 4),
  leaseMs: 3_000,
  graceMs: Number(process.env.AG_SHUTDOWN_GRACE_MS ?? 10_000),
  signal: shutdown.signal,
  handler: sleepJob,
  onEvent: log,
});
console.log("worker stopped");
