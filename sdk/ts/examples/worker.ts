// A complete ag worker in TypeScript: it runs jobs of kind "ts.sleep" (payload {"ms": N}, or
// {"ms": N, "fail": "why"} to fail) and follows docs/worker-protocol.md. In your own project,
// import from "@ag-coord/ag-sdk" instead of "../src/index.js".
//
//   AG_SERVER=http://127.0.0.1:7777 AG_TOKEN=<a worker token> AG_WORKER_LABEL=ts-1 \
//     node dist/examples/worker.js
import { setTimeout as delay } from "node:timers/promises";
import {
  CancelRequestedError,
  ClaimLostError,
  Code,
  ConnectError,
  createAgClient,
  isLostClaim,
  type JobClaim,
  type JsonObject,
} from "../src/index.js";

const ag = createAgClient(process.env.AG_SERVER ?? "http://127.0.0.1:7777", process.env.AG_TOKEN ?? "");
const label = process.env.AG_WORKER_LABEL ?? "ts-worker";
const graceMs = Number(process.env.AG_SHUTDOWN_GRACE_MS ?? 10_000);

// Shutdown (SIGTERM, SIGINT): claim nothing more; the running job has graceMs to finish, then
// it is stopped and handed back with a zero retry delay. A job is never left silently claimed.
const shutdown = new AbortController(); // aborted: claim nothing more
const giveUp = new AbortController(); // aborted: stop the running job now
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  process.once(sig, () => {
    shutdown.abort();
    setTimeout(() => giveUp.abort(), graceMs).unref();
  });
}

// The work itself. It must stop soon after signal is aborted.
async function sleepJob(claim: JobClaim, signal: AbortSignal): Promise<JsonObject> {
  const ms = Number(claim.job.payload?.ms ?? 0);
  for (let done = 0; done < ms; done += 100) {
    claim.setProgress(`slept ${done} of ${ms} ms`); // sent with the next heartbeat
    await delay(Math.min(100, ms - done), undefined, { signal });
  }
  if (claim.job.payload?.fail) throw new Error(String(claim.job.payload.fail));
  return { sleptMs: ms };
}

async function run(claim: JobClaim): Promise<void> {
  const log = (what: string) => console.log(`job ${claim.job.id} claim ${claim.fencingToken}: ${what}`);
  log("claimed");
  const alive = claim.keepAlive({ signal: giveUp.signal }); // heartbeats every lease/3
  let result: JsonObject | undefined;
  let failure: unknown;
  try {
    result = await sleepJob(claim, alive.signal);
  } catch (err) {
    failure = err;
  }
  await alive.stop();
  const why = alive.signal.reason;
  try {
    if (why instanceof ClaimLostError) {
      // Another claim owns the job: any report would be refused. Report nothing.
      log("claim lost; stopped");
    } else if (why instanceof CancelRequestedError) {
      await claim.fail({ error: "cancelled on request" }); // the job becomes CANCELLED
      log("cancelled");
    } else if (failure === undefined) {
      await claim.complete({ result, output: "done\n" });
      log("completed");
    } else if (giveUp.signal.aborted) {
      await claim.fail({ error: "worker shut down before the job finished", retryDelayMs: 0 });
      log("handed back");
    } else {
      await claim.fail({ error: String(failure) }); // retried after the server's backoff
      log("failed");
    }
  } catch (err) {
    // A refused report is final: the claim was lost meanwhile. Never retry it.
    if (!isLostClaim(err)) throw err;
    log(`report refused, the claim was lost: ${(err as ConnectError).message}`);
  }
}

let backoffMs = 100;
while (!shutdown.signal.aborted) {
  let claim: JobClaim | undefined;
  try {
    claim = await ag.claim({ worker: label, kinds: ["ts.sleep"], leaseMs: 3_000, waitMs: 30_000, signal: shutdown.signal });
    backoffMs = 100;
  } catch (err) {
    if (shutdown.signal.aborted) break;
    const code = ConnectError.from(err).code;
    if (code === Code.Unauthenticated || code === Code.PermissionDenied) throw err; // not ours to fix
    console.error(`claim failed, again in ${backoffMs} ms: ${String(err)}`);
    await delay(backoffMs);
    backoffMs = Math.min(backoffMs * 2, 10_000);
    continue;
  }
  if (claim) await run(claim);
}
console.log("worker stopped");
