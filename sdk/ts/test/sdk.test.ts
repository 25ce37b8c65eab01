// The TypeScript SDK against a real `ag serve`: a worker claims, heartbeats and completes jobs;
// a stale claim of the same worker is fenced off by its claim number; keepAlive stops the work
// when the claim is lost or cancelled; errors arrive as Connect codes.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { toJson } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";

import {
  CancelRequestedError,
  ChangeState,
  ClaimLostError,
  Code,
  ConnectError,
  createAgClient,
  isLostClaim,
  JobSchema,
  JobService,
  JobClaim,
  JobState,
  Role,
  safeToRetry,
  type AgClient,
  type Interceptor,
} from "../src/index.js";
import { eventually, startServer, type AgServer } from "./harness.js";

let server: AgServer;
let admin: AgClient;
let worker: AgClient;

before(async () => {
  server = await startServer();
  admin = createAgClient(server.url, server.adminToken, { retries: 0 });
  const res = await admin.admin.createPrincipal({ name: "ts-builder", role: Role.WORKER });
  assert.ok(res.token, "createPrincipal answers the token");
  worker = createAgClient(server.url, res.token, { retries: 0 });
});

after(async () => {
  await server?.stop();
});

/** rejectsWith asserts that p rejects with a ConnectError of code. */
async function rejectsWith(p: Promise<unknown>, code: Code, what: string): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ConnectError, `${what}: want a ConnectError, got ${String(err)}`);
    assert.equal(err.code, code, `${what}: want code ${Code[code]}, got ${Code[err.code]}: ${err.message}`);
    return err;
  }
  assert.fail(`${what}: want ${Code[code]}, got success`);
}

async function enqueue(kind: string, payload: Record<string, number | string> = {}) {
  const res = await admin.jobs.enqueueJob({ kind, payload });
  assert.ok(res.job);
  return res.job;
}

async function getJob(id: string) {
  const res = await admin.jobs.getJob({ jobId: id });
  assert.ok(res.job);
  return res.job;
}

describe("a TypeScript worker", () => {
  it("claims, heartbeats and completes jobs", async () => {
    const ids = [];
    for (let n = 1; n <= 3; n++) ids.push((await enqueue("ts.build", { n })).id);

    const done: string[] = [];
    while (done.length < ids.length) {
      const claim = await worker.claim({ worker: "ts-1", kinds: ["ts.build"], leaseMs: 1_500, waitMs: 2_000 });
      assert.ok(claim, "a job to claim");
      assert.equal(claim.fencingToken, 1n, "the first claim's number is 1");
      assert.equal(claim.job.state, JobState.CLAIMED);
      assert.equal(claim.job.claimedBy, "ts-builder|ts-1");
      const alive = claim.keepAlive();
      claim.setProgress(`building ${String(claim.job.payload?.n)}`);
      // The first job runs past its lease: only the heartbeats keep it.
      await delay(done.length === 0 ? 2_200 : 50, undefined, { signal: alive.signal });
      await alive.stop();
      assert.equal(alive.signal.aborted, false, "the claim was kept");
      const n = Number(claim.job.payload?.n);
      const job = await claim.complete({ result: { n, doubled: 2 * n }, output: "ok\n" });
      assert.equal(job.state, JobState.COMPLETED);
      done.push(job.id);
    }
    assert.deepEqual([...done].sort(), [...ids].sort());

    for (const id of ids) {
      const job = await getJob(id);
      assert.equal(job.state, JobState.COMPLETED);
      assert.equal(job.attempts, 1, "never claimed twice: the heartbeats kept the lease");
      assert.equal(job.claimedBy, "ts-builder|ts-1");
      assert.equal(job.result?.doubled, 2 * Number(job.payload?.n));
      assert.equal(job.output, "ok\n");
    }
    const first = await getJob(done[0]!);
    assert.match(first.progress, /^building \d$/, "the progress travelled with a heartbeat");

    const listed = await admin.jobs.listJobs({ kinds: ["ts.build"], states: [JobState.COMPLETED] });
    assert.equal(listed.jobs.length, 3);
  });

  it("answers undefined when there is nothing to claim", async () => {
    const start = Date.now();
    const claim = await worker.claim({ worker: "ts-1", kinds: ["ts.nothing"], waitMs: 300 });
    assert.equal(claim, undefined);
    assert.ok(Date.now() - start >= 250, "the claim long-polled for its wait");
  });

  it("fails a job, which is queued again", async () => {
    const { id } = await enqueue("ts.flaky");
    const claim = await worker.claim({ worker: "ts-1", kinds: ["ts.flaky"] });
    assert.ok(claim);
    const job = await claim.fail({ error: "flaked", retryDelayMs: 0 });
    assert.equal(job.state, JobState.QUEUED);
    assert.equal(job.lastError, "flaked");
    const again = await worker.claim({ worker: "ts-1", kinds: ["ts.flaky"], waitMs: 5_000 });
    assert.equal(again?.job.id, id);
    assert.equal(again?.fencingToken, 2n, "the second claim's number is 2");
    const final = await again!.fail({ error: "for good", final: true });
    assert.equal(final.state, JobState.FAILED);
  });
});

describe("batches", () => {
  it("claims several jobs in one call and completes them in one, each checked on its own", async () => {
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await enqueue("ts.batch")).id);
    const claims = await worker.claimMany({ worker: "ts-b", kinds: ["ts.batch"], max: 5, waitMs: 2_000 });
    assert.deepEqual(
      claims.map((c) => c.job.id),
      ids,
      "the three jobs, best (oldest) first",
    );
    for (const c of claims) assert.equal(c.fencingToken, 1n, "each job has its own claim number");

    // The second claim reports with a number that is not its own: refused, the others complete.
    const [first, second, third] = claims as [JobClaim, JobClaim, JobClaim];
    const forged = new JobClaim(worker, { ...second.job, attempts: 7 }, second.worker, second.leaseMs);
    const results = await worker.completeMany([
      { claim: first, output: "one" },
      { claim: forged },
      { claim: third, result: { n: 3 } },
    ]);
    assert.equal(results.length, 3);
    const [r1, r2, r3] = results;
    assert.ok(!(r1 instanceof ConnectError) && r1?.state === JobState.COMPLETED && r1.output === "one");
    assert.ok(r2 instanceof ConnectError, "the stale completion is refused");
    assert.equal(r2.code, Code.FailedPrecondition);
    assert.ok(isLostClaim(r2));
    assert.ok(!(r3 instanceof ConnectError) && r3?.state === JobState.COMPLETED);
    assert.equal((await getJob(second.job.id)).state, JobState.CLAIMED, "the refused completion changed nothing");

    assert.deepEqual(await worker.claimMany({ worker: "ts-b", kinds: ["ts.batch"], max: 5 }), [], "nothing left");
  });
});

describe("a stale claim of the same worker is fenced off", () => {
  it("refuses the old claim number on heartbeat, complete and fail, and changes nothing", async () => {
    const { id } = await enqueue("ts.fence", { step: 1 });
    const stale = await worker.claim({ worker: "ts-1", kinds: ["ts.fence"], leaseMs: 1_000 });
    assert.ok(stale);
    assert.equal(stale.job.id, id);
    assert.equal(stale.fencingToken, 1n);

    // The worker pauses past its lease; the same worker name claims the job again. The
    // long-poll answers as soon as the first lease has expired.
    const current = await worker.claim({ worker: "ts-1", kinds: ["ts.fence"], leaseMs: 30_000, waitMs: 10_000 });
    assert.ok(current, "the expired claim is claimed again");
    assert.equal(current.job.id, id);
    assert.equal(current.fencingToken, 2n);
    assert.ok(timestampMs(stale.job.leaseExpiresAt!) <= Date.now() + 50, "the first lease had expired");

    const before = toJson(JobSchema, await getJob(id));
    for (const err of [
      await rejectsWith(stale.heartbeat({ progress: "still here" }), Code.NotFound, "stale heartbeat"),
      await rejectsWith(stale.complete({ result: { stale: true } }), Code.FailedPrecondition, "stale complete"),
      await rejectsWith(stale.fail({ error: "stale" }), Code.NotFound, "stale fail"),
    ]) {
      assert.ok(isLostClaim(err));
    }
    const afterRefusals = toJson(JobSchema, await getJob(id));
    assert.deepEqual(afterRefusals, before, "a refused request changes nothing");
    assert.equal((afterRefusals as { state: string }).state, "JOB_STATE_CLAIMED");

    // keepAlive of the stale claim aborts its signal with ClaimLostError.
    const alive = stale.keepAlive();
    await eventually("the stale keepAlive to abort", async () => alive.signal.aborted, 5_000);
    assert.ok(alive.signal.reason instanceof ClaimLostError, `reason: ${String(alive.signal.reason)}`);
    await alive.stop();

    // The current claim's number is accepted.
    const hb = await current.heartbeat({ progress: "mine" });
    assert.equal(hb.cancelRequested, false);
    const done = await current.complete({ result: { step: 2 } });
    assert.equal(done.state, JobState.COMPLETED);
    assert.equal(done.attempts, 2);
    assert.deepEqual(done.result, { step: 2 });
  });
});

describe("a server with --require-fencing", () => {
  it("refuses reports without a claim number, and accepts the SDK's", async () => {
    const strict = await startServer(["--require-fencing"]);
    try {
      const root = createAgClient(strict.url, strict.adminToken, { retries: 0 });
      const { token } = await root.admin.createPrincipal({ name: "ts-strict", role: Role.WORKER });
      const w = createAgClient(strict.url, token, { retries: 0 });
      const { job } = await root.jobs.enqueueJob({ kind: "ts.strict" });
      const claim = await w.claim({ worker: "ts-1", kinds: ["ts.strict"] });
      assert.equal(claim?.job.id, job?.id);
      const bare = await rejectsWith(w.jobs.heartbeatJob({ jobId: claim!.job.id, worker: "ts-1" }), Code.FailedPrecondition, "no claim number");
      assert.match(bare.rawMessage, /fencing_token/);
      await claim!.heartbeat();
      const done = await claim!.complete({ result: { ok: true } });
      assert.equal(done.state, JobState.COMPLETED);
    } finally {
      await strict.stop();
    }
  });
});

describe("keepAlive", () => {
  it("aborts its signal when the job's cancellation is requested", async () => {
    const { id } = await enqueue("ts.cancel");
    const claim = await worker.claim({ worker: "ts-1", kinds: ["ts.cancel"], leaseMs: 1_200 });
    assert.ok(claim);
    const alive = claim.keepAlive();
    const cancelled = await admin.jobs.cancelJob({ jobId: id });
    assert.equal(cancelled.job?.cancelRequested, true);
    await eventually("keepAlive to see the cancellation", async () => alive.signal.aborted, 5_000);
    assert.ok(alive.signal.reason instanceof CancelRequestedError, `reason: ${String(alive.signal.reason)}`);
    await alive.stop();
    const job = await claim.fail({ error: "cancelled on request" });
    assert.equal(job.state, JobState.CANCELLED, "a failed cancel_requested job is CANCELLED");
  });

  it("stops when its caller's signal is aborted, and stop() ends the heartbeats", async () => {
    await enqueue("ts.stop");
    const claim = await worker.claim({ worker: "ts-1", kinds: ["ts.stop"], leaseMs: 1_000 });
    assert.ok(claim);
    const parent = new AbortController();
    const alive = claim.keepAlive({ signal: parent.signal });
    parent.abort(new Error("shutting down"));
    assert.equal(alive.signal.aborted, true);
    assert.equal((alive.signal.reason as Error).message, "shutting down");
    await alive.stop();
    const job = await claim.fail({ error: "shut down", retryDelayMs: 0 });
    assert.equal(job.state, JobState.QUEUED);
  });
});

describe("errors", () => {
  it("are Connect errors with their codes", async () => {
    const anon = createAgClient(server.url, "agt_not-a-token", { retries: 0 });
    await rejectsWith(anon.jobs.listJobs({}), Code.Unauthenticated, "unknown token");
    await rejectsWith(worker.jobs.enqueueJob({ kind: "ts.x" }), Code.PermissionDenied, "a worker enqueues");
    const bad = await rejectsWith(worker.claim({ worker: "" }), Code.InvalidArgument, "no worker label");
    assert.match(bad.rawMessage, /worker/, "the message names the field");
    await rejectsWith(admin.jobs.getJob({ jobId: "no-such-job" }), Code.NotFound, "unknown job");
  });

  it("service() answers a client of any service with the token", async () => {
    const jobs = admin.service(JobService);
    const res = await jobs.listJobs({ pageSize: 1 });
    assert.ok(res.jobs.length <= 1);
  });

  it("retries unavailable with backoff, and nothing else", async () => {
    let calls = 0;
    const count: Interceptor = (next) => (req) => {
      calls++;
      return next(req);
    };
    // Nothing listens on port 1.
    const down = createAgClient("http://127.0.0.1:1", "t", { retries: 2, retryBaseMs: 20, interceptors: [count] });
    const start = Date.now();
    await rejectsWith(down.jobs.listJobs({}), Code.Unavailable, "server down");
    assert.equal(calls, 3, "one call and two retries");
    assert.ok(Date.now() - start >= 60, "backoff of 20 + 40 ms");

    // A write is retried too when it never reached the server.
    calls = 0;
    await rejectsWith(down.jobs.enqueueJob({ kind: "ag.noop" }), Code.Unavailable, "server down, a write");
    assert.equal(calls, 3, "a write that was never sent is retried");

    calls = 0;
    const anon = createAgClient(server.url, "agt_not-a-token", { retries: 3, retryBaseMs: 1, interceptors: [count] });
    await rejectsWith(anon.jobs.listJobs({}), Code.Unauthenticated, "unknown token");
    assert.equal(calls, 1, "unauthenticated is not retried");
  });
});

describe("safeToRetry", () => {
  it("retries a write only when it cannot apply it twice", () => {
    const safe = new ConnectError("the database is unavailable", Code.Unavailable, new Headers({ "Ag-Retry-Safe": "true" }));
    const ambiguous = new ConnectError("the database is unavailable", Code.Unavailable);
    assert.equal(safeToRetry("EnqueueJob", safe), true, "the server said it was not applied");
    assert.equal(safeToRetry("EnqueueJob", ambiguous), false, "it may have been applied");
    assert.equal(safeToRetry("ListJobs", ambiguous), true, "a read");
    assert.equal(safeToRetry("CompleteJob", ambiguous), true, "fenced by its claim number");
    assert.equal(safeToRetry("Integrate", ambiguous), false, "an integration may have applied");
    assert.equal(safeToRetry("EnqueueJob", new ConnectError("no", Code.InvalidArgument)), false, "not unavailable");
  });
});

describe("leases and integrate", () => {
  it("an agent leases a file, integrates it, and another agent is refused the lease", async () => {
    const repo = await admin.repos.createRepository({ name: "ts-app" });
    assert.ok(repo.repository?.mainline);
    const a = await admin.admin.createPrincipal({ name: "ts-alice", role: Role.AGENT });
    const b = await admin.admin.createPrincipal({ name: "ts-bob", role: Role.AGENT });
    const alice = createAgClient(server.url, a.token, { retries: 0 });
    const bob = createAgClient(server.url, b.token, { retries: 0 });

    const lease = (await alice.leases.acquireLease({ repository: "ts-app", paths: ["src/a.ts"], holder: "w1" })).lease;
    assert.ok(lease && lease.fencingToken > 0n);
    const refused = await rejectsWith(
      bob.leases.acquireLease({ repository: "ts-app", paths: ["src/"], holder: "w2" }),
      Code.Aborted,
      "bob leases alice's directory",
    );
    assert.match(refused.message, /ts-alice\|w1/);

    const res = await alice.repos.integrate({
      repository: "ts-app",
      baseRevision: repo.repository.mainline,
      holder: "w1",
      fencingTokens: [lease.fencingToken],
      message: "from TypeScript",
      edits: [{ path: "src/a.ts", action: { case: "content", value: new TextEncoder().encode("export {};\n") } }],
    });
    assert.equal(res.change?.state, ChangeState.INTEGRATED);
    const tree = await bob.repos.getTree({ repository: "ts-app" });
    assert.deepEqual(tree.entries.map((e) => e.path), ["src/a.ts"]);
    const blob = await bob.repos.getBlob({ digest: tree.entries[0].digest });
    assert.equal(new TextDecoder().decode(blob.content), "export {};\n");
  });
});
