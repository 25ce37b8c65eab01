// The TypeScript SDK of ag: clients for every AGWP v1 service with the bearer token, timeouts
// and retries on `unavailable`, and a job handle that always speaks with its own claim number
// (ADR-0012), so a claim that was handed to someone else is refused instead of acting on the
// new claimant's job.
//
//   const ag = createAgClient("http://127.0.0.1:7777", process.env.AG_TOKEN!);
//   const claim = await ag.claim({ worker: "ts-1", kinds: ["build"], waitMs: 30_000 });
//   if (claim) {
//     const alive = claim.keepAlive(); // heartbeats every lease/3
//     let result, error;
//     try {
//       result = await build(claim.job.payload, alive.signal); // stops when the signal aborts
//     } catch (err) {
//       error = err;
//     }
//     await alive.stop();
//     if (alive.signal.reason instanceof ClaimLostError) {
//       // another claim owns the job now: report nothing
//     } else if (error === undefined) {
//       await claim.complete({ result });
//     } else {
//       await claim.fail({ error: String(error) });
//     }
//   }
//
// runWorker (./worker.ts) is that loop for many jobs at once, claiming and completing them in
// batches on its own. docs/worker-protocol.md has the whole protocol and a complete worker
// (examples/worker.ts).
// Messages and service descriptors are generated from proto/ into ./gen by scripts/generate.

import { create, type DescService, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  createClient,
  type CallOptions,
  type Client,
  type Interceptor,
} from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

import { AdminService } from "./gen/agwp/v1/admin_pb.js";
import { AuditService } from "./gen/agwp/v1/audit_pb.js";
import { LeaseService } from "./gen/agwp/v1/lease_pb.js";
import { RepositoryService } from "./gen/agwp/v1/repository_pb.js";
import { EnvelopeSchema } from "./gen/agwp/v1/attestation_pb.js";
import {
  ClaimJobRequestSchema,
  ClaimJobsRequestSchema,
  CompleteJobRequestSchema,
  FailJobRequestSchema,
  HeartbeatJobRequestSchema,
  JobService,
  type HeartbeatJobResponse,
  type Job,
} from "./gen/agwp/v1/job_pb.js";
import { sleep } from "./sleep.js";

export * from "./gen/agwp/v1/admin_pb.js";
export * from "./gen/agwp/v1/attestation_pb.js";
export * from "./gen/agwp/v1/audit_pb.js";
export * from "./gen/agwp/v1/job_pb.js";
export * from "./gen/agwp/v1/lease_pb.js";
export * from "./gen/agwp/v1/repository_pb.js";
export { Code, ConnectError } from "@connectrpc/connect";
export type { CallOptions, Client, Interceptor, Transport } from "@connectrpc/connect";
export type { JsonObject, JsonValue } from "@bufbuild/protobuf";
export * from "./worker.js";

/** The lease a claim gets when ClaimOptions.leaseMs is not given (the server's default). */
export const DEFAULT_LEASE_MS = 30_000;

/** The most jobs one claimMany claims and the most claims one completeMany completes (the
 * server's limit, as client.MaxBatch in Go). */
export const MAX_BATCH = 256;

/** Options of createAgClient. */
export interface AgClientOptions {
  /** Bound of each call that has no timeout of its own, in ms (default 30 s); a long-polling
   * claim gets its wait on top. */
  timeoutMs?: number;
  /** How often a call that failed with `unavailable` is tried again (default 4), with
   * exponential backoff from retryBaseMs (default 100 ms). No other code is retried. */
  retries?: number;
  retryBaseMs?: number;
  /** "1.1" (default) or "2" (HTTP/2 without TLS for http:// URLs). */
  httpVersion?: "1.1" | "2";
  /** Binary protobuf instead of JSON bodies (default false). */
  useBinaryFormat?: boolean;
  /** Sent as User-Agent (default "ag-ts-sdk"). */
  userAgent?: string;
  /** Further interceptors, run inside the SDK's own. */
  interceptors?: Interceptor[];
}

/** A client of one ag server. */
export interface AgClient {
  readonly baseUrl: string;
  /** The generated clients: every method of the service, with the token and retries. */
  readonly jobs: Client<typeof JobService>;
  readonly admin: Client<typeof AdminService>;
  readonly leases: Client<typeof LeaseService>;
  readonly repos: Client<typeof RepositoryService>;
  readonly audit: Client<typeof AuditService>;
  /** A client of any other service of ./gen, with the same token, timeouts and retries. */
  service<T extends DescService>(service: T): Client<T>;
  /** Asks for a job; answers undefined when none was available within the wait. */
  claim(options: ClaimOptions): Promise<JobClaim | undefined>;
  /** Asks for up to max jobs (1..256) in one call (ClaimJobs), each with its own claim number;
   * answers [] when none was available within the wait, and answers as soon as one was. */
  claimMany(options: ClaimOptions & { max: number }): Promise<JobClaim[]>;
  /** Completes several claims (1..256, of distinct jobs) in one call (CompleteJobs). Each is
   * checked on its own: the answer has, in order, the completed Job or the ConnectError
   * CompleteJob would have rejected with (isLostClaim works on it). */
  completeMany(items: CompleteManyItem[], options?: CallOptions): Promise<Array<Job | ConnectError>>;
}

/** One completion of completeMany. */
export interface CompleteManyItem extends Omit<CompleteOptions, "signal"> {
  claim: JobClaim;
}

/** What a claim asks for. */
export interface ClaimOptions {
  /** The worker's label: 1-128 characters of [A-Za-z0-9._:@/-]. */
  worker: string;
  /** Kinds this worker runs; empty = any. */
  kinds?: string[];
  /** The lease, in ms (default 30 s; 1 s..1 h). */
  leaseMs?: number;
  /** Long-poll: wait up to this long for a job, in ms (max 60 s); 0 = answer at once. */
  waitMs?: number;
  signal?: AbortSignal;
}

/** createAgClient answers a client of the server at baseUrl (such as "http://127.0.0.1:7777")
 * that authenticates with token. */
export function createAgClient(baseUrl: string, token: string, options: AgClientOptions = {}): AgClient {
  const timeoutMs = options.timeoutMs ?? 30_000;
  baseUrl = baseUrl.replace(/\/+$/, "");
  const transport = createConnectTransport({
    baseUrl,
    httpVersion: options.httpVersion ?? "1.1",
    useBinaryFormat: options.useBinaryFormat ?? false,
    defaultTimeoutMs: timeoutMs,
    interceptors: [
      bearer(token, options.userAgent ?? "ag-ts-sdk"),
      retryUnavailable(options.retries ?? 4, options.retryBaseMs ?? 100),
      ...(options.interceptors ?? []),
    ],
  });
  const jobs = createClient(JobService, transport);
  const admin = createClient(AdminService, transport);
  const client: AgClient = {
    baseUrl,
    jobs,
    admin,
    leases: createClient(LeaseService, transport),
    repos: createClient(RepositoryService, transport),
    audit: createClient(AuditService, transport),
    service: (service) => createClient(service, transport),
    async claim(o: ClaimOptions): Promise<JobClaim | undefined> {
      const req = create(ClaimJobRequestSchema, { worker: o.worker, kinds: o.kinds ?? [] });
      if (o.leaseMs) req.lease = durationFromMs(o.leaseMs);
      if (o.waitMs) req.wait = durationFromMs(o.waitMs);
      const res = await jobs.claimJob(req, { signal: o.signal, timeoutMs: timeoutMs + (o.waitMs ?? 0) });
      if (!res.job) return undefined;
      return new JobClaim(client, res.job, o.worker, o.leaseMs || DEFAULT_LEASE_MS);
    },
    async claimMany(o: ClaimOptions & { max: number }): Promise<JobClaim[]> {
      const req = create(ClaimJobsRequestSchema, { worker: o.worker, kinds: o.kinds ?? [], maxJobs: o.max });
      if (o.leaseMs) req.lease = durationFromMs(o.leaseMs);
      if (o.waitMs) req.wait = durationFromMs(o.waitMs);
      const res = await jobs.claimJobs(req, { signal: o.signal, timeoutMs: timeoutMs + (o.waitMs ?? 0) });
      return res.jobs.map((job) => new JobClaim(client, job, o.worker, o.leaseMs || DEFAULT_LEASE_MS));
    },
    async completeMany(items: CompleteManyItem[], options?: CallOptions): Promise<Array<Job | ConnectError>> {
      const res = await jobs.completeJobs(
        { completions: items.map(({ claim, ...o }) => claim.completeRequest(o)) },
        options,
      );
      return res.results.map((r) => {
        if (!r.errorCode) return r.job!;
        return new ConnectError(r.errorMessage, codeOf(r.errorCode));
      });
    },
  };
  return client;
}

/** What a completion reports. */
export interface CompleteOptions {
  result?: JsonObject;
  /** Tail of the log, <= 64 KiB. */
  output?: string;
  /** sha256 of the whole log, "sha256:<hex>". */
  outputDigest?: string;
  /** DSSE envelope; required for kind "validate". */
  attestation?: MessageInitShape<typeof EnvelopeSchema>;
  signal?: AbortSignal;
}

/** What a failure reports. */
export interface FailOptions {
  error: string;
  output?: string;
  /** Retry after this long, in ms; absent: the server's backoff. 0 = at once (a graceful
   * shutdown hands its job back this way). */
  retryDelayMs?: number;
  /** Do not retry: FAILED now. */
  final?: boolean;
  signal?: AbortSignal;
}

/** A running heartbeat of a claim (see JobClaim.keepAlive). */
export interface KeepAlive {
  /** Aborted when the claim is lost (reason: ClaimLostError), its cancellation was requested
   * (reason: CancelRequestedError), or the signal given to keepAlive was aborted. Stop the
   * work when it is. */
  readonly signal: AbortSignal;
  /** Ends the heartbeat (an in-flight heartbeat is abandoned) and resolves once it has ended. */
  stop(): Promise<void>;
}

/** The reason of a KeepAlive signal when the job was handed to another claim: stop the work
 * and report nothing for it. */
export class ClaimLostError extends Error {
  constructor(override readonly cause: unknown) {
    super(`claim lost: the job was handed to another claim (${ConnectError.from(cause).message})`);
    this.name = "ClaimLostError";
  }
}

/** The reason of a KeepAlive signal when the job's cancellation was requested: stop the work
 * and fail the job (without final): a failed cancel_requested job becomes CANCELLED. */
export class CancelRequestedError extends Error {
  constructor() {
    super("the job's cancellation was requested");
    this.name = "CancelRequestedError";
  }
}

/** codeOf reads a Connect error code as CompleteJobs writes it ("failed_precondition"). */
function codeOf(name: string): Code {
  const key = name.replace(/(^|_)([a-z])/g, (_m, _u, c: string) => c.toUpperCase()) as keyof typeof Code;
  return typeof Code[key] === "number" ? Code[key] : Code.Unknown;
}

/** isLostClaim reports whether err says the claim is no longer this worker's: a heartbeat or
 * failure answered not_found, a completion failed_precondition. Stop the work; do not retry. */
export function isLostClaim(err: unknown): boolean {
  if (!(err instanceof ConnectError)) return false;
  return err.code === Code.NotFound || err.code === Code.FailedPrecondition;
}

/** A claimed job. Every call it makes carries the claim's own number, job.attempts at the
 * time of the claim, as fencing_token. */
export class JobClaim {
  /** The job as claimed. */
  readonly job: Job;
  /** The worker label the job was claimed with. */
  readonly worker: string;
  /** The claim's lease, in ms. */
  readonly leaseMs: number;
  /** The claim's number: the fencing token of every heartbeat, completion and failure. */
  readonly fencingToken: bigint;

  #client: AgClient;
  #progress = "";

  constructor(client: AgClient, job: Job, worker: string, leaseMs: number) {
    this.#client = client;
    this.job = job;
    this.worker = worker;
    this.leaseMs = leaseMs;
    this.fencingToken = BigInt(job.attempts);
  }

  /** Extends the lease (to leaseMs from now; default the claim's lease) and reports progress.
   * A lost or stale claim rejects with a ConnectError for which isLostClaim is true
   * (not_found): stop the work, do not complete it. */
  heartbeat(o: { progress?: string; leaseMs?: number } & CallOptions = {}): Promise<HeartbeatJobResponse> {
    const { progress, leaseMs, ...call } = o;
    const req = create(HeartbeatJobRequestSchema, {
      jobId: this.job.id,
      worker: this.worker,
      progress: progress ?? "",
      fencingToken: this.fencingToken,
    });
    if (leaseMs) req.lease = durationFromMs(leaseMs);
    return this.#client.jobs.heartbeatJob(req, call);
  }

  /** Finishes the job. A lost or stale claim rejects with failed_precondition and nothing is
   * stored: do not retry it. */
  async complete(o: CompleteOptions = {}): Promise<Job> {
    const res = await this.#client.jobs.completeJob(this.completeRequest(o), { signal: o.signal });
    return res.job!;
  }

  /** The CompleteJob request of this claim: complete and completeMany send it. */
  completeRequest(o: Omit<CompleteOptions, "signal">) {
    return create(CompleteJobRequestSchema, {
      jobId: this.job.id,
      worker: this.worker,
      result: o.result,
      output: o.output ?? "",
      outputDigest: o.outputDigest ?? "",
      attestation: o.attestation,
      fencingToken: this.fencingToken,
    });
  }

  /** Reports that this claim did not finish the job; it is queued again after retryDelayMs
   * (absent: the server's backoff) while attempts remain. A lost or stale claim rejects with
   * not_found. */
  async fail(o: FailOptions): Promise<Job> {
    const req = create(FailJobRequestSchema, {
      jobId: this.job.id,
      worker: this.worker,
      error: o.error,
      output: o.output ?? "",
      final: o.final ?? false,
      fencingToken: this.fencingToken,
    });
    if (o.retryDelayMs !== undefined) req.retryDelay = durationFromMs(o.retryDelayMs);
    const res = await this.#client.jobs.failJob(req, { signal: o.signal });
    return res.job!;
  }

  /** Records a line of progress for the next heartbeat of keepAlive. */
  setProgress(progress: string): void {
    this.#progress = progress;
  }

  /** keepAlive heartbeats the claim every third of its lease until stop() is called, and
   * aborts its signal at once when the claim is lost (a heartbeat answered not_found) or the
   * job's cancellation was requested. Other errors (the server briefly unreachable) are
   * retried at the next beat: the lease is three beats long. */
  keepAlive(o: { signal?: AbortSignal } = {}): KeepAlive {
    const lost = new AbortController();
    const stopped = new AbortController();
    const parent = o.signal;
    const onParentAbort = () => lost.abort(parent?.reason);
    if (parent?.aborted) onParentAbort();
    else parent?.addEventListener("abort", onParentAbort, { once: true });
    const interval = Math.max(1, Math.floor(this.leaseMs / 3));
    const done = (async () => {
      while (!lost.signal.aborted && !stopped.signal.aborted) {
        await sleep(interval, stopped.signal, lost.signal);
        if (lost.signal.aborted || stopped.signal.aborted) break;
        const progress = this.#progress;
        this.#progress = "";
        try {
          const res = await this.heartbeat({ progress, signal: stopped.signal, timeoutMs: interval });
          if (res.cancelRequested) lost.abort(new CancelRequestedError());
        } catch (err) {
          if (stopped.signal.aborted) break;
          if (isLostClaim(err)) lost.abort(new ClaimLostError(err));
        }
      }
      parent?.removeEventListener("abort", onParentAbort);
    })();
    return {
      signal: lost.signal,
      async stop() {
        stopped.abort();
        await done;
      },
    };
  }
}

/** bearer adds the token and the User-Agent to every call. */
function bearer(token: string, userAgent: string): Interceptor {
  return (next) => (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    req.header.set("User-Agent", userAgent);
    return next(req);
  };
}

/** retryUnavailable tries a unary call again when it failed with `unavailable` (the server
 * unreachable or restarting) and sending it again cannot apply it twice (safeToRetry), with
 * exponential backoff, within the call's own deadline. */
function retryUnavailable(retries: number, baseMs: number): Interceptor {
  return (next) => async (req) => {
    if (req.stream) return next(req);
    let delay = baseMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await next(req);
      } catch (err) {
        if (attempt >= retries || req.signal.aborted || !safeToRetry(req.method.name, err)) {
          throw err;
        }
      }
      await sleep(delay, req.signal);
      delay *= 2;
    }
  };
}

/** safeToRetry reports whether a call that failed with err may be sent again without the risk
 * of applying it twice: it failed as `unavailable`, and it only reads (or stores content by
 * digest), or it never reached the server (the connection was refused), or the server said it
 * was not applied (`Ag-Retry-Safe: true`). A write that failed otherwise may have been applied:
 * the caller decides. */
export function safeToRetry(method: string, err: unknown): boolean {
  const ce = ConnectError.from(err);
  if (ce.code !== Code.Unavailable) return false;
  if (ce.metadata.get("Ag-Retry-Safe") === "true") return true;
  if (/^(Get|List|Find|Watch)/.test(method) || method === "WhoAmI" || method === "UploadBlobs") return true;
  // Fenced by the claim number or lease token they carry: a repeat of one that applied is
  // refused as a lost claim, and changes nothing.
  if (["HeartbeatJob", "CompleteJob", "CompleteJobs", "FailJob", "RenewLease"].includes(method)) return true;
  for (let cause: unknown = ce.cause; cause; cause = (cause as { cause?: unknown }).cause) {
    const code = (cause as { code?: unknown }).code;
    if (code === "ECONNREFUSED" || code === "EHOSTUNREACH" || code === "ENOTFOUND") return true;
  }
  return false;
}

