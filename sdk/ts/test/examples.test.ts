// The examples that the documents show, as processes against a real `ag serve`: the quickstart
// of docs/api.md (examples/quickstart.ts), and the worker of docs/worker-protocol.md
// (examples/worker.ts), which completes and fails jobs, stops on cancellation, and on SIGTERM
// hands its running job back at once instead of leaving it claimed.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, it } from "node:test";

import { createAgClient, JobState, Role, type AgClient } from "../src/index.js";
import { cleanEnv, eventually, startServer, stopProcess, type AgServer } from "./harness.js";

const examples = join(dirname(fileURLToPath(import.meta.url)), "..", "examples");

let server: AgServer;
let admin: AgClient;

before(async () => {
  server = await startServer();
  admin = createAgClient(server.url, server.adminToken, { retries: 0 });
});

after(async () => {
  await server?.stop();
});

async function job(id: string) {
  const res = await admin.jobs.getJob({ jobId: id });
  return res.job!;
}

it("the quickstart enqueues a job and lists it", async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [join(examples, "quickstart.js")], {
    env: cleanEnv({ AG_SERVER: server.url, AG_TOKEN: server.adminToken }),
    timeout: 20_000,
  });
  assert.match(stdout, /^calling as admin$/m);
  assert.match(stdout, /"state":"JOB_STATE_QUEUED"/);
  assert.match(stdout, /^1 build job\(s\) queued$/m);
  assert.match(stdout, /^GetJob: NotFound: /m);
  const { jobs } = await admin.jobs.listJobs({ kinds: ["build"] });
  assert.equal(jobs.length, 1);
});

it("the example worker runs jobs, obeys cancellation and hands its job back on SIGTERM", async () => {
  const { token } = await admin.admin.createPrincipal({ name: "example", role: Role.WORKER });
  const proc = spawn(process.execPath, [join(examples, "worker.js")], {
    env: cleanEnv({ AG_SERVER: server.url, AG_TOKEN: token, AG_WORKER_LABEL: "ex-1", AG_SHUTDOWN_GRACE_MS: "300" }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  proc.stdout!.on("data", (b: Buffer) => (out += b.toString()));
  proc.stderr!.on("data", (b: Buffer) => (out += b.toString()));
  const exited = new Promise<number | null>((res) => proc.once("exit", (code) => res(code)));
  try {
    const enqueue = async (payload: Record<string, number | string>, maxAttempts = 0) =>
      (await admin.jobs.enqueueJob({ kind: "ts.sleep", payload, maxAttempts })).job!.id;

    const ok = await enqueue({ ms: 200 });
    const bad = await enqueue({ ms: 50, fail: "boom" }, 1); // one attempt: FAILED at once
    await eventually("the two jobs to finish", async () => {
      const [a, b] = [await job(ok), await job(bad)];
      return a.state === JobState.COMPLETED && b.state === JobState.FAILED;
    });
    const done = await job(ok);
    assert.deepEqual(done.result, { sleptMs: 200 });
    assert.equal(done.claimedBy, "example|ex-1");
    assert.match((await job(bad)).lastError, /boom/);

    const cancelled = await enqueue({ ms: 60_000 });
    await eventually("the long job to be claimed", async () => (await job(cancelled)).state === JobState.CLAIMED);
    await admin.jobs.cancelJob({ jobId: cancelled });
    await eventually("the worker to stop the cancelled job", async () => (await job(cancelled)).state === JobState.CANCELLED);

    const running = await enqueue({ ms: 60_000 });
    await eventually("the job to be claimed and its progress heartbeated", async () => {
      const j = await job(running);
      return j.state === JobState.CLAIMED && j.progress.startsWith("slept");
    });
    proc.kill("SIGTERM");
    const code = await Promise.race([exited, new Promise<string>((res) => setTimeout(() => res("timeout"), 10_000))]);
    assert.equal(code, 0, `the worker exits 0 soon after SIGTERM; its output:\n${out}`);
    const handedBack = await job(running);
    assert.equal(handedBack.state, JobState.QUEUED, "the running job is handed back, not left claimed");
    assert.match(handedBack.lastError, /shut down/);
    assert.equal(handedBack.claimedBy, "");
    assert.match(out, /worker stopped/);
  } catch (err) {
    throw new Error(`${String(err)}\nthe worker's output:\n${out}`, { cause: err });
  } finally {
    await stopProcess(proc, exited.then(() => undefined));
  }
});
