// runWorker against a real `ag serve`: a worker of many slots claims and completes in batches on
// its own, each completion with its job's own claim number; a completion refused because the
// claim was taken over is that job's alone and is not tried again; heartbeats keep a slow job;
// a job enqueued while others run starts at once; failures, cancellations and a shutdown are
// reported as docs/worker-protocol.md says; claim errors back off or end the loop.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { timestampMs } from "@bufbuild/protobuf/wkt";

import {
  CancelRequestedError,
  ClaimLostError,
  Code,
  ConnectError,
  createAgClient,
  JobState,
  Outcome,
  PermanentError,
  Role,
  runWorker,
  type AgClient,
  type ClaimJobsResponse,
  type CompleteJobRequest,
  type CompleteJobsRequest,
  type FailJobRequest,
  type HeartbeatJobRequest,
  type Interceptor,
  type Job,
  type JobClaim,
  type JsonObject,
  type WorkerEvent,
  type WorkerOptions,
} from "../src/index.js";
import { eventually, startServer, type AgServer } from "./harness.js";

let server: AgServer;
let admin: AgClient;
let workerToken: string;

before(async () => {
  server = await startServer();
  admin = createAgClient(server.url, server.adminToken, { retries: 0 });
  workerToken = (await admin.admin.createPrincipal({ name: "ts-runner", role: Role.WORKER })).token;
});

after(async () => {
  await server?.stop();
});

/** Calls records what a client sent and was answered, seen from inside it. */
class Calls {
  /** Calls made, by method name. */
  readonly count = new Map<string, number>();
  /** The claim numbers each job was claimed with, in order. */
  readonly claimed = new Map<string, bigint[]>();
  /** Each completion sent (CompleteJob, or one of a CompleteJobs call), with its call's number
   * and how many completions that call carried. */
  readonly completions: Array<{ jobId: string; fencingToken: bigint; call: number; batch: number }> = [];
  /** The jobs failed (FailJob), in order. */
  readonly failed: string[] = [];
  /** Heartbeats sent, by job. */
  readonly heartbeats = new Map<string, number>();
  /** Jobs whose heartbeats fail as if the server were unreachable. */
  readonly partitioned = new Set<string>();

  readonly interceptor: Interceptor = (next) => async (req) => {
    const method = req.method.name;
    const call = [...this.count.values()].reduce((a, b) => a + b, 0);
    this.count.set(method, (this.count.get(method) ?? 0) + 1);
    if (req.stream) return next(req);
    if (method === "HeartbeatJob") {
      const { jobId } = req.message as unknown as HeartbeatJobRequest;
      this.heartbeats.set(jobId, (this.heartbeats.get(jobId) ?? 0) + 1);
      if (this.partitioned.has(jobId)) throw new ConnectError("partitioned by the test", Code.Unavailable);
    } else if (method === "CompleteJob") {
      const c = req.message as unknown as CompleteJobRequest;
      this.completions.push({ jobId: c.jobId, fencingToken: c.fencingToken, call, batch: 1 });
    } else if (method === "CompleteJobs") {
      const { completions } = req.message as unknown as CompleteJobsRequest;
      for (const c of completions) this.completions.push({ jobId: c.jobId, fencingToken: c.fencingToken, call, batch: completions.length });
    } else if (method === "FailJob") {
      this.failed.push((req.message as unknown as FailJobRequest).jobId);
    }
    const res = await next(req);
    if (!res.stream && method === "ClaimJobs") {
      for (const j of (res.message as unknown as ClaimJobsResponse).jobs) {
        this.claimed.set(j.id, [...(this.claimed.get(j.id) ?? []), BigInt(j.attempts)]);
      }
    }
    return res;
  };

  calls(...methods: string[]): number {
    return methods.reduce((n, m) => n + (this.count.get(m) ?? 0), 0);
  }
}

/** A worker client that records its calls. */
function workerClient(calls: Calls): AgClient {
  return createAgClient(server.url, workerToken, { retries: 0, interceptors: [calls.interceptor] });
}

/** start runs runWorker until stop() is called; events are what it told onEvent. */
function start(client: AgClient, o: Omit<WorkerOptions, "signal" | "onEvent">) {
  const shutdown = new AbortController();
  const events: WorkerEvent[] = [];
  const done = runWorker(client, { ...o, signal: shutdown.signal, onEvent: (e) => events.push(e) });
  return {
    events,
    done,
    /** The events of one type, by job id. */
    of(type: WorkerEvent["type"]): string[] {
      return events.flatMap((e) => (e.type === type && "claim" in e ? [e.claim.job.id] : []));
    },
    async stop() {
      shutdown.abort();
      await done;
    },
  };
}

async function enqueue(kind: string, payload: JsonObject = {}, maxAttempts = 0): Promise<string> {
  const res = await admin.jobs.enqueueJob({ kind, payload, maxAttempts });
  return res.job!.id;
}

async function getJob(id: string): Promise<Job> {
  return (await admin.jobs.getJob({ jobId: id })).job!;
}

async function listAll(kind: string): Promise<Job[]> {
  const jobs: Job[] = [];
  let pageToken = "";
  do {
    const res = await admin.jobs.listJobs({ kinds: [kind], pageSize: 1000, pageToken });
    jobs.push(...res.jobs);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return jobs;
}

/** untilAborted rejects with signal's reason once it is aborted: a job that runs until stopped. */
function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

describe("runWorker", () => {
  it("drains 2,000 jobs with 64 slots in far fewer calls than jobs, each completion with its job's claim number", { timeout: 120_000 }, async () => {
    const jobs = 2_000;
    const kind = "ts.drain";
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (let n = next++; n < jobs; n = next++) await enqueue(kind, { n });
      }),
    );

    const calls = new Calls();
    let completed = 0;
    const unexpected: WorkerEvent[] = [];
    const shutdown = new AbortController();
    const done = runWorker(workerClient(calls), {
      worker: "drain-1",
      kinds: [kind],
      concurrency: 64,
      leaseMs: 60_000,
      waitMs: 1_000,
      signal: shutdown.signal,
      // Jobs of 0 to 2 ms, so that they do not all end in the turn they started in.
      handler: async (claim) => {
        const n = Number(claim.job.payload?.n);
        await delay(n % 3);
        return { n, twice: 2 * n };
      },
      onEvent: (e) => {
        if (e.type !== "claimed" && e.type !== "completed") unexpected.push(e);
        if (e.type === "completed" && ++completed === jobs) shutdown.abort();
      },
    });
    await done;
    assert.deepEqual(unexpected, [], "every job claimed and completed, nothing else");
    assert.equal(completed, jobs);

    const all = await listAll(kind);
    assert.equal(all.length, jobs);
    for (const job of all) {
      assert.equal(job.state, JobState.COMPLETED, `job ${job.id}`);
      assert.equal(job.attempts, 1, `job ${job.id} was claimed once`);
      assert.equal(job.claimedBy, "ts-runner|drain-1");
      const n = Number(job.payload?.n);
      assert.deepEqual(job.result, { n, twice: 2 * n }, `job ${job.id} has its own result`);
    }

    const claimCalls = calls.calls("ClaimJobs", "ClaimJob");
    const reportCalls = calls.calls("CompleteJobs", "CompleteJob");
    console.log(`# ${jobs} jobs: ${claimCalls} claim calls, ${reportCalls} completion calls, largest batch ${Math.max(...calls.completions.map((c) => c.batch))}`);
    assert.equal(calls.calls("ClaimJob"), 0, "claims go through ClaimJobs");
    assert.ok(claimCalls <= jobs / 10, `${claimCalls} claim calls for ${jobs} jobs: the worker does not claim for all its free slots at once`);
    assert.ok(reportCalls <= jobs / 4, `${reportCalls} completion calls for ${jobs} jobs: the worker does not report together`);
    assert.equal(calls.calls("FailJob", "HeartbeatJob"), 0);

    // Every job was claimed once and completed once, with the claim number it was claimed with.
    assert.equal(calls.completions.length, jobs);
    assert.equal(new Set(calls.completions.map((c) => c.jobId)).size, jobs, "no job was reported twice");
    for (const c of calls.completions) {
      assert.deepEqual(calls.claimed.get(c.jobId), [c.fencingToken], `job ${c.jobId} completed with its own claim number`);
      assert.ok(c.batch <= 256, "at most the server's batch in a call");
    }
  });

  it("reports nothing for a claim taken over, and a refused completion is that job's alone and never retried", { timeout: 60_000 }, async () => {
    const kind = "ts.takeover";
    const ids: string[] = [];
    for (let n = 0; n < 9; n++) ids.push(await enqueue(kind, { n }));
    const [refusedId, lostId] = ids as [string, string];
    const calls = new Calls();
    // The worker loses touch with the server for two of its jobs: their leases run out.
    calls.partitioned.add(refusedId);
    calls.partitioned.add(lostId);

    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const w = start(workerClient(calls), {
      worker: "fence-1",
      kinds: [kind],
      concurrency: 9, // every slot busy: the worker claims nothing while the test takes over
      leaseMs: 1_000,
      handler: async (claim, signal) => {
        if (claim.job.id === lostId) return untilAborted(signal);
        await Promise.race([gate, untilAborted(signal)]);
        return { n: Number(claim.job.payload?.n), by: "worker" };
      },
    });
    try {
      await eventually("the nine jobs to be claimed", async () => w.of("claimed").length === 9);

      // The same worker, restarted under the same label, claims the two jobs whose leases ran
      // out: only the claim number tells the claims apart.
      const thief = createAgClient(server.url, workerToken, { retries: 0 });
      const taken = new Map<string, JobClaim>();
      while (taken.size < 2) {
        for (const c of await thief.claimMany({ worker: "fence-1", kinds: [kind], leaseMs: 30_000, waitMs: 5_000, max: 2 })) taken.set(c.job.id, c);
      }
      assert.deepEqual([...taken.keys()].sort(), [refusedId, lostId].sort(), "the two jobs whose heartbeats failed");
      for (const c of taken.values()) assert.equal(c.fencingToken, 2n);
      await taken.get(refusedId)!.complete({ result: { by: "thief" } });

      // Heartbeats reach the server again: the worker learns its claim is lost and stops the job.
      calls.partitioned.delete(lostId);
      await eventually("the worker to stop the job it lost", async () => w.of("lost").includes(lostId), 5_000);
      const lost = w.events.find((e) => e.type === "lost");
      assert.ok(lost?.type === "lost" && lost.error instanceof ClaimLostError);

      open();
      await eventually("the eight other jobs to be reported", async () => w.of("completed").length + w.of("refused").length === 8, 10_000);
    } finally {
      await w.stop();
    }

    assert.deepEqual(w.of("refused"), [refusedId]);
    const refused = w.events.find((e) => e.type === "refused");
    assert.ok(refused?.type === "refused" && refused.error.code === Code.FailedPrecondition, "refused as a lost claim");
    assert.deepEqual(w.of("completed").sort(), ids.slice(2).sort(), "the others completed");
    for (const id of ids.slice(2)) {
      const job = await getJob(id);
      assert.equal(job.state, JobState.COMPLETED);
      assert.equal(job.attempts, 1);
      assert.deepEqual(job.result, { n: Number(job.payload?.n), by: "worker" });
    }

    const mine = calls.completions.filter((c) => c.jobId === refusedId);
    assert.deepEqual(mine.map((c) => c.fencingToken), [1n], "the worker's completion was sent once, with its claim number");
    const stolen = await getJob(refusedId);
    assert.equal(stolen.state, JobState.COMPLETED);
    assert.equal(stolen.attempts, 2);
    assert.deepEqual(stolen.result, { by: "thief" }, "the refused completion did not overwrite the current claim's");

    assert.equal(calls.completions.filter((c) => c.jobId === lostId).length, 0, "nothing reported for the lost claim");
    assert.deepEqual(calls.failed, [], "no refusal or loss became a failure");
    const kept = await getJob(lostId);
    assert.equal(kept.state, JobState.CLAIMED, "the current claim keeps the job");
    assert.equal(kept.attempts, 2);

    // The eight handlers returned together: their completions went together, the refused one
    // among them.
    const eight = calls.completions.filter((c) => ids.includes(c.jobId));
    const reportCalls = new Set(eight.map((c) => c.call)).size;
    console.log(`# the eight completions went in ${reportCalls} call(s): ${eight.map((c) => c.batch).join(",")}`);
    assert.ok(reportCalls < 8, `${reportCalls} calls for 8 completions that came together`);
  });

  it("keeps a job longer than its lease with heartbeats, and starts a job enqueued meanwhile at once", { timeout: 30_000 }, async () => {
    const kind = "ts.slow";
    const calls = new Calls();
    const w = start(workerClient(calls), {
      worker: "slow-1",
      kinds: [kind],
      concurrency: 4,
      leaseMs: 1_000,
      waitMs: 10_000,
      handler: async (claim, signal) => {
        const ms = Number(claim.job.payload?.ms ?? 0);
        for (let done = 0; done < ms; done += 100) {
          claim.setProgress(`slept ${done} of ${ms} ms`);
          await delay(100, undefined, { signal });
        }
        return { sleptMs: ms };
      },
    });
    try {
      const slow = await enqueue(kind, { ms: 2_500 });
      await eventually("the slow job to be claimed", async () => w.of("claimed").includes(slow));
      await delay(200);
      // Three slots are free and the queue is empty: the worker waits for a job, not for the
      // slow one to end.
      const quick = await enqueue(kind, { ms: 0 });
      await eventually("the quick job to complete", async () => (await getJob(quick)).state === JobState.COMPLETED, 1_500);
      assert.equal((await getJob(slow)).state, JobState.CLAIMED, "the quick job did not wait for the slow one");

      await eventually("the slow job to complete", async () => (await getJob(slow)).state === JobState.COMPLETED, 10_000);
      const job = await getJob(slow);
      assert.equal(job.attempts, 1, "its lease never ran out: it was claimed once");
      assert.deepEqual(job.result, { sleptMs: 2_500 });
      assert.match(job.progress, /^slept \d+ of 2500 ms$/, "the progress travelled with a heartbeat");
      assert.ok((calls.heartbeats.get(slow) ?? 0) >= 5, `${calls.heartbeats.get(slow)} heartbeats in 2.5 s with a lease of 1 s`);
      assert.equal(calls.heartbeats.get(quick) ?? 0, 0, "a job shorter than a third of its lease needs none");
      const claims = calls.calls("ClaimJobs");
      assert.ok(claims <= 6, `${claims} claim calls for two jobs: a worker with free slots waits on the server, it does not poll`);
    } finally {
      await w.stop();
    }
    assert.equal(w.of("completed").length, 2);
  });

  it("fails, fails for good, retries, cancels on request, completes with an Outcome, and fails a result it cannot send", { timeout: 30_000 }, async () => {
    const kind = "ts.outcomes";
    const reasons = new Map<string, unknown>();
    const w = start(workerClient(new Calls()), {
      worker: "out-1",
      kinds: [kind],
      concurrency: 8,
      leaseMs: 1_000,
      waitMs: 10_000,
      handler: async (claim, signal): Promise<JsonObject | Outcome> => {
        const p = claim.job.payload ?? {};
        if (p.fail) throw new Error(String(p.fail));
        if (p.permanent) throw new PermanentError(String(p.permanent));
        if (p.flaky && claim.fencingToken === 1n) throw new Error("flaked");
        if (p.forever) {
          try {
            return await untilAborted(signal);
          } catch (err) {
            reasons.set(claim.job.id, signal.reason);
            throw err;
          }
        }
        if (p.outcome) return new Outcome({ result: { ok: true }, output: "the log's tail\n" });
        if (p.unencodable) return { ratio: NaN };
        return { attempt: Number(claim.fencingToken) };
      },
    });
    try {
      const boom = await enqueue(kind, { fail: "boom" }, 1);
      const permanent = await enqueue(kind, { permanent: "bad payload" }, 5);
      const flaky = await enqueue(kind, { flaky: true }, 3);
      const outcome = await enqueue(kind, { outcome: true });
      const cancelled = await enqueue(kind, { forever: true });
      const unencodable = await enqueue(kind, { unencodable: true }, 1);

      await eventually("the long job to be claimed", async () => w.of("claimed").includes(cancelled));
      await admin.jobs.cancelJob({ jobId: cancelled });
      const settled = new Set([JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED]);
      await eventually("every job to settle", async () => {
        for (const id of [boom, permanent, flaky, outcome, cancelled, unencodable]) if (!settled.has((await getJob(id)).state)) return false;
        return true;
      }, 15_000);

      const b = await getJob(boom);
      assert.equal(b.state, JobState.FAILED, "its only attempt failed");
      assert.match(b.lastError, /boom/);
      const p = await getJob(permanent);
      assert.equal(p.state, JobState.FAILED, "a PermanentError fails the job for good");
      assert.equal(p.attempts, 1, "with attempts left");
      assert.match(p.lastError, /bad payload/);
      const f = await getJob(flaky);
      assert.equal(f.state, JobState.COMPLETED, "a failed attempt is retried by the server");
      assert.equal(f.attempts, 2);
      assert.deepEqual(f.result, { attempt: 2 });
      const o = await getJob(outcome);
      assert.deepEqual(o.result, { ok: true });
      assert.equal(o.output, "the log's tail\n");
      const c = await getJob(cancelled);
      assert.equal(c.state, JobState.CANCELLED);
      assert.equal(c.lastError, "cancelled on request");
      assert.ok(reasons.get(cancelled) instanceof CancelRequestedError, "the handler was told why it stopped");
      const u = await getJob(unencodable);
      assert.equal(u.state, JobState.FAILED, "a result that JSON cannot carry fails its job");
      assert.match(u.lastError, /result cannot be sent/);
    } finally {
      await w.stop();
    }
    assert.equal(w.of("cancelled").length, 1);
    assert.ok(w.of("failed").length >= 4, "boom, bad payload, the flaked attempt and the result that could not be sent");
    const failed = w.events.find((e) => e.type === "failed" && e.claim.job.payload?.permanent);
    assert.ok(failed?.type === "failed" && failed.error instanceof PermanentError && failed.job.state === JobState.FAILED);
  });

  it("on shutdown claims nothing more, lets jobs finish within the grace, then hands the rest back", { timeout: 30_000 }, async () => {
    const kind = "ts.shutdown";
    const calls = new Calls();
    const long: string[] = [];
    for (let i = 0; i < 3; i++) long.push(await enqueue(kind, { forever: true }));
    const short = await enqueue(kind, { ms: 500 });
    const w = start(workerClient(calls), {
      worker: "down-1",
      kinds: [kind],
      concurrency: 4, // no claim in flight when the shutdown begins: the test sees every one
      leaseMs: 30_000,
      graceMs: 1_500,
      handler: async (claim, signal) => {
        if (claim.job.payload?.forever) return untilAborted(signal);
        await delay(Number(claim.job.payload?.ms), undefined, { signal });
        return { done: true };
      },
    });
    await eventually("the four jobs to be claimed", async () => w.of("claimed").length === 4);
    const stopped = Date.now();
    const claimsBefore = calls.calls("ClaimJobs");
    const stopping = w.stop();
    const late = await enqueue(kind, { ms: 0 });
    await stopping;
    const took = Date.now() - stopped;
    assert.ok(took >= 1_400 && took < 5_000, `runWorker resolved ${took} ms after the shutdown, with a grace of 1.5 s`);

    // Everything was reported by the time runWorker resolved.
    assert.equal((await getJob(short)).state, JobState.COMPLETED, "the job that finished within the grace completed");
    for (const id of long) {
      const job = await getJob(id);
      assert.equal(job.state, JobState.QUEUED, "a running job is handed back, not left claimed");
      assert.equal(job.claimedBy, "");
      assert.match(job.lastError, /shut down/);
      assert.ok(timestampMs(job.runAfter!) <= Date.now(), "to be claimed again at once");
    }
    assert.deepEqual(w.of("handed back").sort(), [...long].sort());
    const late2 = await getJob(late);
    assert.equal(late2.state, JobState.QUEUED);
    assert.equal(late2.attempts, 0, "nothing is claimed once the shutdown began");
    assert.equal(calls.calls("ClaimJobs"), claimsBefore, "no claim after the shutdown, though a slot came free");
  });

  it("backs off when claims fail, and stops with the error when claiming cannot work", { timeout: 30_000 }, async () => {
    // Nothing listens on port 1: every claim fails as unavailable.
    const down = createAgClient("http://127.0.0.1:1", workerToken, { retries: 0 });
    const w = start(down, { worker: "w", handler: async () => undefined });
    await eventually("four failed claims", async () => w.events.length >= 4, 5_000);
    await w.stop();
    const waits = w.events.map((e) => (e.type === "claim failed" ? e.retryMs : -1));
    assert.deepEqual(waits.slice(0, 4), [100, 200, 400, 800]);

    const anon = createAgClient(server.url, "agt_not-a-token", { retries: 0 });
    const started = Date.now();
    await assert.rejects(runWorker(anon, { worker: "w", handler: async () => undefined }), (err: unknown) => {
      assert.ok(err instanceof ConnectError && err.code === Code.Unauthenticated, String(err));
      return true;
    });
    assert.ok(Date.now() - started < 2_000, "at once, not after backing off");
    const worker = createAgClient(server.url, workerToken, { retries: 0 });
    await assert.rejects(runWorker(worker, { worker: "", handler: async () => undefined }), (err: unknown) => {
      assert.ok(err instanceof ConnectError && err.code === Code.InvalidArgument, String(err));
      return true;
    });
    await assert.rejects(runWorker(worker, { worker: "w", concurrency: 0, handler: async () => undefined }), RangeError);
  });
});
