// runWorker: the whole worker loop of docs/worker-protocol.md, claiming and reporting in batches
// on its own as ag-worker does (internal/worker): one ClaimJobs call asks for as many jobs as
// there are free slots, and the completions that finish while a report is in flight go together
// in the next CompleteJobs call. Nothing about the claims changes: each job has its own claim
// number, heartbeats and report, so a lost claim is one job's business, never a batch's.
//
// index.ts re-exports this file and this file uses index.ts's classes; it only uses them inside
// functions, so the circular import is settled before anything here runs.

import { setMaxListeners } from "node:events";
import { toJson, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import { CompleteJobRequestSchema, type Job } from "./gen/agwp/v1/job_pb.js";
import {
  CancelRequestedError,
  ClaimLostError,
  isLostClaim,
  MAX_BATCH,
  type AgClient,
  type CompleteOptions,
  type JobClaim,
} from "./index.js";
import { sleep } from "./sleep.js";

/** What a handler may report besides the result: return one from the handler to complete the
 * job with its output, the log's digest or an attestation (a validate job needs one). */
export class Outcome {
  constructor(readonly completion: Omit<CompleteOptions, "signal">) {}
}

/** Thrown by a handler, fails the job for good (final): for what a retry cannot fix, such as a
 * bad payload. Any other error fails the attempt, and the server retries the job after its
 * backoff while attempts remain. */
export class PermanentError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "PermanentError";
  }
}

/** Runs one job. It must stop soon after signal is aborted: the claim was lost (reason
 * ClaimLostError), the job's cancellation was requested (CancelRequestedError), or the worker
 * is shutting down and the grace ran out. What it resolves with completes the job: the result,
 * or an Outcome; what it throws fails the attempt. claim.setProgress sends a line of progress
 * with the next heartbeat. */
export type JobHandler = (claim: JobClaim, signal: AbortSignal) => Promise<JsonObject | Outcome | undefined | void>;

/** What runWorker tells onEvent, for logs and metrics. */
export type WorkerEvent =
  | { type: "claimed"; claim: JobClaim }
  /** The job is reported; job is the server's answer (COMPLETED, QUEUED again, FAILED or
   * CANCELLED). "failed" carries what the handler threw, "handed back" is a job the shutdown
   * stopped, queued again at once. */
  | { type: "completed" | "cancelled"; claim: JobClaim; job: Job }
  | { type: "failed" | "handed back"; claim: JobClaim; job: Job; error: unknown }
  /** A heartbeat said the claim is lost: the job was stopped and nothing reported. */
  | { type: "lost"; claim: JobClaim; error: ClaimLostError }
  /** The report was refused (error: failed_precondition or not_found): the claim was lost
   * meanwhile, nothing was stored, and the report is not tried again. */
  | { type: "refused"; claim: JobClaim; error: ConnectError }
  /** The report could not be sent (the server away longer than the client's retries): the job
   * stays claimed until its lease runs out, then it is claimed again. */
  | { type: "unreported"; claim: JobClaim; error: unknown }
  /** A claim call failed; the next one goes after retryMs. */
  | { type: "claim failed"; error: unknown; retryMs: number };

/** Options of runWorker. */
export interface WorkerOptions {
  /** The worker's label, sent with every claim and report: 1-128 characters of
   * [A-Za-z0-9._:@/-]. */
  worker: string;
  /** Kinds this worker runs; empty = any. */
  kinds?: string[];
  /** Jobs run at once (default 1, as ag-worker's --concurrency). Claims ask for every free slot
   * at once, up to MAX_BATCH a call. */
  concurrency?: number;
  /** The lease of each claim, in ms (default 30 s; 1 s..1 h); heartbeats go every third. */
  leaseMs?: number;
  /** How long a claim waits for a job when none is queued, in ms (default 30 s; 1 ms..60 s). */
  waitMs?: number;
  /** Aborted: the worker shuts down. It claims nothing more, lets running jobs finish within
   * graceMs, then stops them and hands them back to be claimed again at once. */
  signal?: AbortSignal;
  /** The shutdown's grace, in ms (default 10 s). */
  graceMs?: number;
  handler: JobHandler;
  /** Called with what happens to each job and claim; it must not throw. */
  onEvent?: (event: WorkerEvent) => void;
}

/** How many CompleteJobs calls a worker has in flight at once. ag-worker has one, because with
 * more the first completions of a burst went alone; here the completions of one turn of the
 * event loop go together however many calls are in flight, and with four the reports of jobs
 * of varied length wait less (bench/drain.ts --work-ms 5: about 2,300 to 2,750 jobs/s against
 * 2,000 to 2,200 with one, for 11 instead of 18 jobs a call). */
const COMPLETERS = 4;

/** The least and the most a failed claim waits before the next one. */
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 10_000;

/** Answers to a claim that waiting will not change: a bad token or role, a bad request (the
 * label, a kind, the lease), a server without ClaimJobs. */
const FATAL_CLAIM_CODES = new Set([Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument, Code.Unimplemented]);

/** runWorker claims jobs of options.kinds and runs them with options.handler, up to
 * options.concurrency at once, until options.signal is aborted; then it shuts down gracefully
 * and resolves once every job it claimed was reported (or found lost). It rejects with the
 * claim's error when claiming cannot work (unauthenticated, permission_denied,
 * invalid_argument, unimplemented), after reporting what ran. Other claim errors are tried
 * again with backoff (100 ms doubling to 10 s).
 *
 * Each job is heartbeaten with keepAlive while it runs, and reported with its own claim number:
 * completed (together with the other completions that came while a report was in flight),
 * failed (for good if the handler threw a PermanentError), failed with "cancelled on request"
 * when its cancellation was requested (it becomes CANCELLED), not reported at all when its
 * claim was lost, and handed back (failed with a zero retry delay) when the shutdown's grace
 * ran out. A refused report is never tried again. */
export async function runWorker(client: AgClient, options: WorkerOptions): Promise<void> {
  const concurrency = options.concurrency ?? 1;
  const waitMs = options.waitMs ?? 30_000;
  const graceMs = options.graceMs ?? 10_000;
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError(`concurrency must be a positive integer, got ${concurrency}`);
  // A claim that answers at once when nothing is queued would have the loop spin.
  if (!(waitMs >= 1 && waitMs <= 60_000)) throw new RangeError(`waitMs must be 1 to 60000, got ${waitMs}`);
  if (!(graceMs >= 0)) throw new RangeError(`graceMs must not be negative, got ${graceMs}`);
  const emit = (e: WorkerEvent) => {
    try {
      options.onEvent?.(e);
    } catch {
      // A logger's failure must not leave a job unreported.
    }
  };

  // stopping: claim nothing more (options.signal, or a claim error that waiting will not fix).
  // giveUp: the grace is over, stop the running jobs.
  const stopping = new AbortController();
  const giveUp = new AbortController();
  // Every running job's keepAlive listens to giveUp, and every claim call to stopping.
  setMaxListeners(0, stopping.signal, giveUp.signal);
  let graceTimer: NodeJS.Timeout | undefined;
  const stop = (reason: unknown) => {
    if (stopping.signal.aborted) return;
    stopping.abort(reason);
    graceTimer = setTimeout(() => giveUp.abort(new Error("the worker shut down and the grace ran out")), graceMs);
  };
  const onAbort = () => stop(options.signal?.reason);
  if (options.signal?.aborted) onAbort();
  else options.signal?.addEventListener("abort", onAbort, { once: true });

  const completer = new Completer();
  const running = new Set<Promise<void>>();
  let slotFreed: (() => void) | undefined;
  let fatal: unknown;

  const run = async (claim: JobClaim): Promise<void> => {
    emit({ type: "claimed", claim });
    const alive = claim.keepAlive({ signal: giveUp.signal });
    let completion: Omit<CompleteOptions, "signal"> = {};
    let threw = false;
    let error: unknown;
    try {
      const value = await options.handler(claim, alive.signal);
      completion = value instanceof Outcome ? value.completion : { result: value ?? undefined };
    } catch (err) {
      threw = true;
      error = err;
    }
    if (!threw) {
      try {
        // A result that cannot be encoded (undefined, NaN, a bigint in it) would fail the whole
        // CompleteJobs call it went in: it fails its own job instead.
        toJson(CompleteJobRequestSchema, claim.completeRequest(completion));
      } catch (err) {
        threw = true;
        error = new Error(`the job's result cannot be sent: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
    }
    await alive.stop();
    const why: unknown = alive.signal.reason;
    try {
      if (why instanceof ClaimLostError) {
        // Another claim owns the job: any report would be refused.
        emit({ type: "lost", claim, error: why });
      } else if (why instanceof CancelRequestedError) {
        // The server makes a cancel-requested job CANCELLED when its claim fails.
        emit({ type: "cancelled", claim, job: await claim.fail({ error: "cancelled on request" }) });
      } else if (!threw) {
        emit({ type: "completed", claim, job: await completer.complete(client, claim, completion) });
      } else if (giveUp.signal.aborted) {
        // Handed back now rather than after the server's backoff: another worker takes it.
        const job = await claim.fail({ error: "worker shut down before the job finished", retryDelayMs: 0 });
        emit({ type: "handed back", claim, job, error });
      } else {
        const job = await claim.fail({ error: String(error).slice(0, 4000), final: error instanceof PermanentError });
        emit({ type: "failed", claim, job, error });
      }
    } catch (err) {
      if (isLostClaim(err)) emit({ type: "refused", claim, error: err as ConnectError });
      else emit({ type: "unreported", claim, error: err });
    }
  };
  const start = (claim: JobClaim) => {
    const job: Promise<void> = run(claim).finally(() => {
      running.delete(job);
      slotFreed?.();
    });
    running.add(job);
  };
  // slot resolves when a running job has been reported, or the worker stops.
  const slot = () =>
    new Promise<void>((resolve) => {
      const done = () => {
        slotFreed = undefined;
        stopping.signal.removeEventListener("abort", done);
        resolve();
      };
      slotFreed = done;
      stopping.signal.addEventListener("abort", done, { once: true });
    });

  let backoffMs = BACKOFF_MIN_MS;
  while (!stopping.signal.aborted) {
    const free = concurrency - running.size;
    if (free === 0) {
      await slot();
      continue;
    }
    let claims: JobClaim[];
    try {
      // Even while jobs run the claim long-polls: with slots free and the queue empty, a job
      // enqueued now starts now, not when a running job ends. A busy queue answers at once.
      claims = await client.claimMany({
        worker: options.worker,
        kinds: options.kinds,
        leaseMs: options.leaseMs,
        waitMs,
        max: Math.min(free, MAX_BATCH),
        signal: stopping.signal,
      });
    } catch (err) {
      if (stopping.signal.aborted) break;
      if (FATAL_CLAIM_CODES.has(ConnectError.from(err).code)) {
        fatal = err;
        stop(err);
        break;
      }
      emit({ type: "claim failed", error: err, retryMs: backoffMs });
      await sleep(backoffMs, stopping.signal);
      backoffMs = Math.min(backoffMs * 2, BACKOFF_MAX_MS);
      continue;
    }
    backoffMs = BACKOFF_MIN_MS;
    for (const claim of claims) start(claim);
  }
  while (running.size > 0) await Promise.all(running);
  clearTimeout(graceTimer);
  options.signal?.removeEventListener("abort", onAbort);
  if (fatal !== undefined) throw fatal;
}

/** A completion waiting for its CompleteJobs call. */
interface Pending {
  claim: JobClaim;
  completion: Omit<CompleteOptions, "signal">;
  resolve: (job: Job) => void;
  reject: (err: unknown) => void;
}

/** Completer reports completions in batches with no batch size to choose: what came during one
 * turn of the event loop, or while all COMPLETERS calls were in flight, goes in the next call,
 * up to MAX_BATCH. A busy worker thus makes one call for many jobs, and an idle one sends each
 * completion at once. */
class Completer {
  #waiting: Pending[] = [];
  #inFlight = 0;
  #scheduled = false;

  /** complete answers the completed job, or rejects with its refusal (isLostClaim) or the
   * error of the call that carried it. */
  complete(client: AgClient, claim: JobClaim, completion: Omit<CompleteOptions, "signal">): Promise<Job> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ claim, completion, resolve, reject });
      if (!this.#scheduled) {
        this.#scheduled = true;
        // The jobs that a claim batch started often end in the same turn: wait for them.
        setImmediate(() => {
          this.#scheduled = false;
          this.#send(client);
        });
      }
    });
  }

  #send(client: AgClient): void {
    while (this.#inFlight < COMPLETERS && this.#waiting.length > 0) {
      const batch = this.#waiting.splice(0, MAX_BATCH);
      this.#inFlight++;
      void this.#report(client, batch).finally(() => {
        this.#inFlight--;
        this.#send(client);
      });
    }
  }

  async #report(client: AgClient, batch: Pending[]): Promise<void> {
    if (batch.length === 1) {
      const [p] = batch as [Pending];
      await p.claim.complete(p.completion).then(p.resolve, p.reject);
      return;
    }
    let results: Array<Job | ConnectError>;
    try {
      results = await client.completeMany(batch.map((p) => ({ claim: p.claim, ...p.completion })));
    } catch (err) {
      for (const p of batch) p.reject(err);
      return;
    }
    batch.forEach((p, i) => {
      const r = results[i];
      if (r === undefined) p.reject(new ConnectError(`CompleteJobs answered ${results.length} results for ${batch.length} completions`, Code.Internal));
      else if (r instanceof ConnectError) p.reject(r);
      else p.resolve(r);
    });
  }
}
