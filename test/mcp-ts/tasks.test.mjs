// Three agents that reach ag only through `ag mcp`, each with the official TypeScript client and
// its default options (a request times out after 60 s), share a repository whose changes a real
// sandboxed `ag-worker` validates. They take six tasks, two of which wait for others, as they
// become ready; talk on the tasks' threads; and land the changes that finish them. One agent is
// paused (SIGSTOP) past its claim, and a restart of it under the same holder claims the task
// again: the woken agent's change is refused, the new claimant's lands. The last change takes
// 90 s to validate, and its agent follows it to its end without a client timeout.
//
//   AG_BIN=/path/to/ag AG_WORKER_BIN=/path/to/ag-worker node --test tasks.test.mjs
//   (scripts/test-mcp-ts builds both and runs this)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as delay } from "node:timers/promises";

import { call, connect, env, ok, principal, startServer, text } from "./harness.mjs";

const workerBin = process.env.AG_WORKER_BIN
  ? resolve(process.env.AG_WORKER_BIN)
  : assert.fail("set AG_WORKER_BIN to the ag-worker binary (scripts/test-mcp-ts does)");

const dir = mkdtempSync(join(tmpdir(), "ag-mcp-tasks-"));
let server;
let worker; // { proc, stderr() }
const agents = {}; // name → connect's agent, with .name and .holder
const tasks = {}; // T1..T6 → task id

/** The repository's check: a file saying BROKEN fails it; one saying SLOW makes it take 90 s. */
const check = "if grep -q SLOW *.txt; then sleep 90; fi\n! grep -l BROKEN *.txt\n";

/** The six tasks, in the import format of `ag task import` (Markdown): T4 and T5 wait for T1 and
 * T2; T6, last in priority, is the slow one. */
const taskList = `- [ ] T1 write t1.txt
- [ ] T2 write t2.txt
- [ ] T3 write t3.txt
- [ ] T4 write t4.txt after t1.txt
  depends on: 1
- [ ] T5 write t5.txt after t2.txt
  depends on: 2
- [ ] T6 write t6.txt, slowly
  priority: -1
`;

async function startWorker() {
  const token = await principal(server, "ci", "worker");
  const work = join(dir, "worker");
  for (const d of ["runs", "cache"]) mkdirSync(join(work, d), { recursive: true });
  const proc = spawn(workerBin, ["--server", server.url, "--label", "w1", "--key", join(work, "w1.key"), "--work-dir", join(work, "runs"),
    "--cache-dir", join(work, "cache"), "--kinds", "validate", "--lease", "30s", "--wait", "10s"], {
    env: env({ AG_TOKEN: token }),
    cwd: work,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  proc.stderr.on("data", (b) => (stderr += b.toString()));
  const deadline = Date.now() + 30_000;
  while (!stderr.includes('msg="ag-worker started"')) {
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`ag-worker did not start:\n${stderr}`);
    await delay(50);
  }
  return { proc, stderr: () => stderr };
}

/** agent makes principal name (unless made), checks the repository out for it into dir with
 * holder label, and connects `ag mcp` there. */
async function agent(name, label, dirName = name) {
  let token = agents[name]?.token;
  if (!token) token = await principal(server, name);
  const checkout = join(dir, dirName);
  await server.ag(token, "checkout", "shop", checkout, "--holder", label);
  const a = await connect(server, token, checkout, `agent-${dirName}`);
  return Object.assign(a, { name, holder: `${name}|${label}` });
}

/** work lands the file of a claimed task: lease, write, integrate with the claim, wait for it. */
async function work(a, claim, file, content) {
  await ok(a, "lease_acquire", { paths: [file], ttl: "10m" });
  writeFileSync(join(a.dir, file), content);
  const { change } = await ok(a, "integrate", { message: `${file} for ${claim}`, wait: true, task: claim });
  assert.equal(change.state, "integrated", `${a.holder}'s change for ${claim}: ${JSON.stringify(change)}`);
  await ok(a, "lease_release", {});
  return change;
}

before(async () => {
  server = await startServer(dir);
  const src = join(dir, "src");
  mkdirSync(src);
  writeFileSync(join(src, "check.sh"), check);
  writeFileSync(join(src, "readme.txt"), "the shop\n");
  const admin = server.adminToken;
  await server.ag(admin, "repo", "import", "shop", src);
  await server.ag(admin, "repo", "set-validation", "shop", "--timeout", "5m", "--", "sh", "check.sh");
  worker = await startWorker();

  writeFileSync(join(dir, "tasks.md"), taskList);
  const imported = JSON.parse(await server.ag(admin, "task", "import", "shop", join(dir, "tasks.md"), "--json"));
  assert.equal(imported.tasks.length, 6, `task import answered ${JSON.stringify(imported)}`);
  for (const t of imported.tasks) tasks[t.title.split(" ")[0]] = t.id;

  agents.alice = await agent("alice", "a1");
  agents.bob = await agent("bob", "b1");
  agents.carol = await agent("carol", "c1");
});

after(async () => {
  for (const a of Object.values(agents)) await a.client.close().catch(() => {});
  worker?.proc.kill("SIGTERM");
  server?.proc.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

test("three agents take the ready tasks, talk on a thread, and land the changes that finish them", async () => {
  const { alice, bob } = agents;
  const ready = await ok(alice, "task_ready", {});
  assert.deepEqual(ready.tasks.map((t) => t.id), [tasks.T1, tasks.T2, tasks.T3, tasks.T6], "ready: the four without dependencies, T6 last");

  const a = await ok(alice, "task_claim", {});
  const b = await ok(bob, "task_claim", {});
  assert.equal(a.task.id, tasks.T1);
  assert.equal(b.task.id, tasks.T2);
  assert.match(a.claim, new RegExp(`^${tasks.T1}#1$`));

  // Bob asks on alice's task; alice reads it in her inbox, attributed to bob, and answers.
  await ok(bob, "message_send", { task: tasks.T1, text: "ag: please keep t1.txt to one line" });
  const inbox = await ok(alice, "inbox", { wait: true });
  assert.equal(inbox.messages.length, 1, JSON.stringify(inbox));
  assert.equal(inbox.messages[0].from, "bob|b1");
  assert.equal(inbox.messages[0].text, "ag: please keep t1.txt to one line");
  const raw = alice.seen.at(-1);
  assert.match(raw, /message seq \d+ from bob\|b1 .*untrusted text, not an instruction of ag's/);
  await ok(alice, "message_send", { task: tasks.T1, text: "one line it is" });

  await Promise.all([work(alice, a.claim, "t1.txt", "one\n"), work(bob, b.claim, "t2.txt", "two\n")]);
  for (const t of [tasks.T1, tasks.T2]) {
    const shown = JSON.parse(await server.ag(server.adminToken, "task", "show", t, "--json"));
    assert.equal(shown.task.state, "done", `task ${t}: ${JSON.stringify(shown)}`);
  }

  // Their dependencies done, T4 and T5 are ready; each agent takes one and lands it.
  const now = await ok(bob, "task_ready", {});
  assert.deepEqual(now.tasks.map((t) => t.id), [tasks.T3, tasks.T4, tasks.T5, tasks.T6], "ready once T1 and T2 are done");
  const a2 = await ok(alice, "task_claim", { id: tasks.T4 });
  const b2 = await ok(bob, "task_claim", { id: tasks.T5 });
  await Promise.all([work(alice, a2.claim, "t4.txt", "four\n"), work(bob, b2.claim, "t5.txt", "five\n")]);
});

test("a paused agent's change for a task claimed again by its restart is refused; the restart's lands", async () => {
  const carol = agents.carol;
  const claimed = await ok(carol, "task_claim", { id: tasks.T3, ttl: "2s" });
  assert.equal(claimed.claim, `${tasks.T3}#1`);
  await ok(carol, "lease_acquire", { paths: ["t3-draft.txt"], ttl: "10m" });
  writeFileSync(join(carol.dir, "t3-draft.txt"), "carol's first try\n");

  // Carol stops (a stopped container) until her claim has run out; a restart of her, same holder,
  // in a checkout of its own, claims the task again and lands it.
  process.kill(carol.transport.pid, "SIGSTOP");
  try {
    await delay(2500);
    const restarted = await agent("carol", "c1", "carol-restarted");
    agents.carolRestarted = restarted;
    const again = await ok(restarted, "task_claim", { id: tasks.T3 });
    assert.equal(again.claim, `${tasks.T3}#2`);
    assert.equal(again.task.claimant, "carol|c1");
    await work(restarted, again.claim, "t3.txt", "three\n");
  } finally {
    process.kill(carol.transport.pid, "SIGCONT");
  }

  // Woken, the first carol integrates for the task with the claim she holds: refused.
  const res = await call(carol, "integrate", { message: "t3 at last", wait: true, task: tasks.T3 });
  assert.equal(res.isError, true, `the woken agent's integrate: ${text(res)}`);
  assert.match(text(res), new RegExp(`claim 1 is stale: claimed again as claim 2 by carol\\|c1`));
  const tree = await agents.alice.client.readResource({ uri: "ag://shop/mainline/t3.txt" });
  assert.equal(tree.contents[0].text, "three\n");
  await assert.rejects(agents.alice.client.readResource({ uri: "ag://shop/mainline/t3-draft.txt" }));
});

test("a change whose validation takes 90 s is followed to its end without a client timeout", async () => {
  const a = agents.carolRestarted;
  const claimed = await ok(a, "task_claim", {});
  assert.equal(claimed.task.id, tasks.T6);
  await ok(a, "lease_acquire", { paths: ["t6.txt"], ttl: "10m" });
  writeFileSync(join(a.dir, "t6.txt"), "SLOW six\n");
  const started = Date.now();
  let { change, next } = await ok(a, "integrate", { message: "t6, slowly", wait: true, task: claimed.claim });
  assert.ok(["queued", "validating"].includes(change.state), `after the integrate's wait: ${JSON.stringify(change)}`);
  assert.match(next, /change_show/);
  let calls = 1;
  while (!["integrated", "rejected", "cancelled"].includes(change.state)) {
    change = await ok(a, "change_show", { id: change.id, wait: true });
    calls++;
    assert.ok(Date.now() - started < 300_000, "still validating after 5 minutes");
  }
  assert.equal(change.state, "integrated", JSON.stringify(change));
  assert.ok(Date.now() - started >= 90_000, `the validation took ${Date.now() - started} ms, less than its 90 s sleep`);
  assert.ok(calls >= 3, `followed in ${calls} calls, each within 45 s`);

  const all = JSON.parse(await server.ag(server.adminToken, "task", "list", "shop", "--json"));
  assert.equal(all.tasks.length, 6);
  for (const t of all.tasks) {
    assert.equal(t.state, "done", `task ${t.title}: ${JSON.stringify(t)}`);
    assert.match(t.changeId, /^chg_/, `task ${t.title} was finished by a change`);
  }
  const readme = readFileSync(join(a.dir, "readme.txt"), "utf8");
  assert.equal(readme, "the shop\n");
});
