// Measures how fast runWorker drains a queue of no-op jobs from a running server, and how many
// claim and completion calls it makes per job; with --single, the same with the loop of one job
// at a time that examples/worker.ts used to run (ClaimJob, then CompleteJob), in --concurrency
// loops; with --binary, over protobuf instead of JSON; with --work-ms, each job takes up to that
// long. The token must be allowed to enqueue and to claim: an admin token does both.
//
//   AG_SERVER=http://127.0.0.1:7777 AG_TOKEN=<an admin token> \
//     node dist/bench/drain.js [--jobs 20000] [--concurrency 64] [--single] [--binary] [--work-ms 0]
//
// The jobs are enqueued first, under a kind of this run's own, and the drain starts once the
// server has sealed their audit events, as `ag bench` does; it is timed from the loop's start
// to the last completion.
import { setMaxListeners } from "node:events";
import { parseArgs } from "node:util";
import { setTimeout as delay } from "node:timers/promises";

import { createAgClient, runWorker, type AgClient, type Interceptor } from "../src/index.js";

const { values: args } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    concurrency: { type: "string", default: "64" },
    single: { type: "boolean", default: false },
    binary: { type: "boolean", default: false },
    "work-ms": { type: "string", default: "0" },
  },
});
const jobs = Number(args.jobs);
const workMs = Number(args["work-ms"]);
const concurrency = Number(args.concurrency);
if (!(Number.isInteger(jobs) && jobs > 0 && Number.isInteger(concurrency) && concurrency > 0 && workMs >= 0)) {
  throw new Error("--jobs and --concurrency must be positive integers, --work-ms not negative");
}
// A job's work: none, or up to --work-ms, so that jobs do not all end in the turn they began.
const work = () => (workMs > 0 ? delay(Math.random() * workMs) : undefined);
const server = process.env.AG_SERVER ?? "http://127.0.0.1:7777";
const token = process.env.AG_TOKEN ?? "";
const kind = `ts.bench-${Date.now().toString(36)}`;

const calls = new Map<string, number>();
const count: Interceptor = (next) => (req) => {
  calls.set(req.method.name, (calls.get(req.method.name) ?? 0) + 1);
  return next(req);
};
const ag = createAgClient(server, token, { interceptors: [count], useBinaryFormat: args.binary });

let start = performance.now();
let next = 0;
await Promise.all(
  Array.from({ length: 16 }, async () => {
    while (next++ < jobs) await ag.jobs.enqueueJob({ kind });
  }),
);
let took = (performance.now() - start) / 1000;
console.log(`enqueue: ${jobs} jobs in ${took.toFixed(2)} s: ${(jobs / took).toFixed(0)} jobs/s`);
console.log(`sealed: ${await settled(ag)} audit events before the drain`);
calls.clear();

let done = 0;
let end = 0;
const problems: string[] = [];
const drained = new AbortController();
setMaxListeners(0, drained.signal); // every loop's claim listens to it
const finished = () => {
  if (++done === jobs) {
    end = performance.now();
    drained.abort();
  }
};
start = performance.now();
if (args.single) {
  await Promise.all(
    Array.from({ length: concurrency }, async (_, i) => {
      while (!drained.signal.aborted) {
        const claim = await ag
          .claim({ worker: `bench-${i}`, kinds: [kind], leaseMs: 60_000, waitMs: 1_000, signal: drained.signal })
          .catch((err: unknown) => {
            if (drained.signal.aborted) return undefined;
            throw err;
          });
        if (!claim) continue;
        await work();
        await claim.complete();
        finished();
      }
    }),
  );
} else {
  await runWorker(ag, {
    worker: "bench",
    kinds: [kind],
    concurrency,
    leaseMs: 60_000,
    waitMs: 1_000,
    signal: drained.signal,
    handler: async () => {
      await work();
      return undefined;
    },
    onEvent: (e) => {
      if (e.type === "completed") finished();
      else if (e.type !== "claimed") problems.push(`${e.type}: ${"error" in e ? String(e.error) : ""}`);
    },
  });
}
if (problems.length > 0) throw new Error(`the drain did not go cleanly:\n${problems.slice(0, 10).join("\n")}`);
took = (end - start) / 1000;
const per = (...methods: string[]) => methods.reduce((n, m) => n + (calls.get(m) ?? 0), 0);
const claims = per("ClaimJob", "ClaimJobs");
const reports = per("CompleteJob", "CompleteJobs");
console.log(`drain: ${jobs} jobs in ${took.toFixed(2)} s: ${(jobs / took).toFixed(0)} jobs/s (${args.single ? "one job a call" : "runWorker"}, concurrency ${concurrency}${args.binary ? ", binary" : ""}${workMs ? `, jobs of 0-${workMs} ms` : ""})`);
console.log(
  `calls: ${claims} claims (${(claims / jobs).toFixed(3)}/job, ${(jobs / claims).toFixed(1)} jobs each), ` +
    `${reports} completions (${(reports / jobs).toFixed(3)}/job, ${(jobs / reports).toFixed(1)} jobs each)`,
);

/** settled waits until the server's audit checkpoint has stopped growing for 1.5 s (longer than
 * its sealer waits between seals) and answers its size. */
async function settled(client: AgClient): Promise<bigint> {
  let size = -1n;
  let grew = performance.now();
  for (;;) {
    const cp = await client.audit.getCheckpoint({});
    if (cp.size !== size) {
      size = cp.size;
      grew = performance.now();
    } else if (performance.now() - grew >= 1_500) {
      return size;
    }
    await delay(20);
  }
}
