// Enqueue a job and follow it with the TypeScript SDK. In your own project, import from
// "@ag-coord/ag-sdk" instead of "../src/index.js".
//
//   AG_SERVER=http://127.0.0.1:7777 AG_TOKEN=<an admin or agent token> node dist/examples/quickstart.js
import { toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError, createAgClient, JobSchema, JobState } from "../src/index.js";

const ag = createAgClient(process.env.AG_SERVER ?? "http://127.0.0.1:7777", process.env.AG_TOKEN ?? "");

const { principal } = await ag.admin.whoAmI({});
console.log(`calling as ${principal?.name}`);

const { job } = await ag.jobs.enqueueJob({ kind: "build", payload: { target: "//app:server" }, priority: 5 });
console.log(toJsonString(JobSchema, job!));

const { jobs } = await ag.jobs.listJobs({ states: [JobState.QUEUED], kinds: ["build"] });
console.log(`${jobs.length} build job(s) queued`);

try {
  await ag.jobs.getJob({ jobId: "no-such-job" });
} catch (err) {
  const e = ConnectError.from(err);
  console.log(`GetJob: ${Code[e.code]}: ${e.rawMessage}`); // GetJob: NotFound: ...
}
