// Tasks and messages in the console, as a reader sees them against a real ag serve: the Tasks
// page of a repository (ready, claimed with the claimant and the time left, waiting with what it
// waits for, done with the change that finished it, cancelled), a task's page with its thread,
// and a change's page with its task claim and its messages, each following the server without a
// reload. Tasks, claims and messages are made through the API, as agents make them.
// Run with scripts/test-console.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Env, texts, until } from "./harness.mjs";

let env;

before(async () => {
  env = await Env.start();
  await seed();
});

after(async () => {
  await env?.stop();
});

// watched makes the page record every dialog (an alert) and answers the list.
function watched(page) {
  page.dialogs = [];
  page.on("dialog", (d) => {
    page.dialogs.push(d.message());
    void d.dismiss();
  });
  return page;
}

function clean(page) {
  assert.deepEqual(page.errors, [], "the page threw uncaught errors");
  assert.deepEqual(page.dialogs ?? [], [], "the page opened dialogs: agent text ran as script");
}

// rows answers, for the rows of data-testid id, the text of each cell.
function rows(page, id) {
  return page.$$eval(`[data-testid="${id}"]`, (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
}

const xss = "<img src=x onerror=alert(1)>";

// A repository's tasks, one of each kind, made by the agents ada and bob (holders ada|a1 and
// bob|b1) through the API.
let repo, reader, ada, bob, tasks, change;

async function seed() {
  repo = await env.repo("planning");
  reader = await env.principal("rory", "reader");
  ada = await env.principal("ada", "agent");
  bob = await env.principal("bob", "agent");
  const create = async (req, token = ada.token) =>
    (await env.call("TaskService/CreateTask", { repository: repo, ...req }, token)).task;
  const claim = async (task, token, holder, ttl = "600s") =>
    (await env.call("TaskService/ClaimTask", { repository: repo, taskId: task.id, holder, ttl }, token)).task;

  const ready = await create({
    title: "Add the login form", body: "A form with a name and a password.\nKeep it plain.",
    labels: ["web", "ui"], paths: ["web/login/"], priority: 5,
  });
  const claimed = await create({ title: "Write the sessions API", labels: ["api"], priority: 3 });
  const waiting = await create({ title: "Ship the login", dependsOn: [ready.id, claimed.id], priority: 9 });
  const byChange = await create({ title: "Fix the build", labels: ["ci"] });
  const byHand = await create({ title: "Decide the session length" });
  const cancelled = await create({ title: "Try another framework" });

  const held = await claim(claimed, bob.token, "b1");
  assert.equal(held.claimant, "bob|b1");
  assert.equal(held.claimNumber, "1");
  const fixing = await claim(byChange, ada.token, "a1");
  change = await env.integrateFile(ada.token, {
    repository: repo, label: "a1", path: "build.sh", content: "echo fixed\n", message: "Fix the build",
    taskId: fixing.id, taskClaimNumber: fixing.claimNumber,
  });
  assert.equal(change.state, "CHANGE_STATE_INTEGRATED", JSON.stringify(change));
  assert.equal(change.taskId, byChange.id);
  const decided = await claim(byHand, bob.token, "b1");
  await env.call("TaskService/ReleaseTaskClaim", { taskId: decided.id, claimNumber: decided.claimNumber, done: true }, bob.token);
  await env.call("TaskService/CancelTask", { taskId: cancelled.id, reason: "not now" }, ada.token);
  const { task: finished } = await env.call("TaskService/GetTask", { taskId: byChange.id }, reader.token);
  assert.equal(finished.state, "TASK_STATE_DONE", JSON.stringify(finished));
  assert.equal(finished.changeId, change.id);
  tasks = { ready, claimed, waiting, byChange, byHand, cancelled };
}

test("the Tasks page shows ready, claimed, waiting, done and cancelled tasks", async () => {
  // From the repository page, as a person gets there.
  const page = watched(await env.signedIn(`/#/repo/${repo}`, reader.token));
  await page.getByTestId("repo-tasks").click();
  await until(page, "the Tasks page with its done tasks", () => document.querySelector('[data-testid="done-count"]')?.textContent === "2");
  assert.equal(new URL(page.url()).hash, `#/tasks/${repo}`);
  assert.equal(await page.getByTestId("nav-tasks").getAttribute("href"), `#/tasks/${repo}`, "the nav's Tasks is the repository's");

  assert.deepEqual(await rows(page, "task-ready"), [["5", "Add the login form", "webui", "—", await cell(page, "task-ready", 4)]]);
  assert.deepEqual(await texts(page, "task-label"), ["web", "ui"]);

  const [claimedRow] = await rows(page, "task-claimed");
  assert.equal(claimedRow[0], "Write the sessions API");
  assert.equal(claimedRow[1], "bob|b1", "the claimant");
  assert.equal(claimedRow[2], "#1", "the claim's number");
  assert.match(claimedRow[3], /^(9m [0-5]\ds|10m 00s)$/, "the time left of a 10 minute claim");
  // The time left counts down without a reload.
  await until(page, "the time left to count down", (was) => {
    const now = document.querySelector('[data-testid="task-left"]')?.textContent;
    return now && now !== was;
  }, claimedRow[3]);

  const [waitingRow, ...more] = await rows(page, "task-waiting");
  assert.deepEqual(more, [], "one task waits");
  assert.equal(waitingRow[1], "Ship the login");
  assert.equal(waitingRow[3], "Add the login form (open), Write the sessions API (claimed)", "what it waits for, with where each stands");
  const waitsFor = await page.$$eval('[data-testid="task-waits-for"] a', (as) => as.map((a) => a.getAttribute("href")));
  assert.deepEqual(waitsFor, [`#/task/${tasks.ready.id}`, `#/task/${tasks.claimed.id}`]);

  const done = await rows(page, "task-done");
  const finishedBy = Object.fromEntries(done.map((r) => [r[0], r[1]]));
  assert.deepEqual(finishedBy, { "Fix the build": change.id, "Decide the session length": "done without a change" });
  assert.equal(await page.getByTestId("task-change").getAttribute("href"), `#/change/${change.id}`);

  assert.deepEqual((await rows(page, "task-cancelled")).map((r) => r[0]), ["Try another framework"]);

  // A task claimed now moves from Ready to Claimed without a reload; its claim, which expires in
  // four seconds and records no event then, moves it back by itself.
  await page.evaluate(() => (window.__marker = 1));
  await env.call("TaskService/ClaimTask", { repository: repo, taskId: tasks.ready.id, holder: "a2", ttl: "4s" }, ada.token);
  await until(page, "the claimed task in Claimed", () =>
    document.querySelector('[data-testid="ready-count"]')?.textContent === "0" &&
    [...document.querySelectorAll('[data-testid="task-claimed"]')].some((r) => r.textContent.includes("ada|a2")));
  await until(page, "the expired claim's task back in Ready", () =>
    document.querySelector('[data-testid="ready-count"]')?.textContent === "1" &&
    document.querySelector('[data-testid="claimed-count"]')?.textContent === "1");
  assert.equal(await page.evaluate(() => window.__marker), 1, "the page was reloaded");
  clean(page);
});

// cell answers the text of cell i of the first row of data-testid id: a time the test does not
// predict.
async function cell(page, id, i) {
  return (await rows(page, id))[0]?.[i];
}

test("a task's page shows it with its thread, which grows live; the message's HTML is text", async () => {
  await env.call("TaskService/SendMessage", {
    repository: repo, taskId: tasks.ready.id, holder: "b1", text: `I can take the form after the API.\nSee ${xss}`,
  }, bob.token);

  const page = watched(await env.signedIn(`/#/tasks/${repo}`, reader.token));
  await page.getByTestId("task-ready").getByRole("link", { name: "Add the login form" }).click();
  await page.getByTestId("task-title").waitFor();
  assert.equal(new URL(page.url()).hash, `#/task/${tasks.ready.id}`);
  assert.equal(await page.getByTestId("task-title").textContent(), "Add the login form");
  assert.equal(await page.getByTestId("task-body").textContent(), "A form with a name and a password.\nKeep it plain.");
  assert.deepEqual(await texts(page, "task-label"), ["web", "ui"]);
  assert.equal(await page.getByTestId("task-paths").textContent(), "web/login/");
  assert.equal(await page.getByTestId("task-state").textContent(), "ready");

  await until(page, "the thread's message", () => document.querySelectorAll('[data-testid="message"]').length === 1);
  assert.deepEqual(await texts(page, "message-author"), ["bob|b1"]);
  assert.deepEqual(await texts(page, "message-text"), [`I can take the form after the API.\nSee ${xss}`],
    "the message as bob wrote it, its HTML as text");
  assert.equal(await page.locator('[data-testid="thread"] img').count(), 0, "the message's HTML made an element");
  assert.match(await page.locator('[data-testid="message"]').first().textContent(), /agent-written/, "the message is marked as agent-written");

  // A new message shows without a reload.
  await page.evaluate(() => (window.__marker = 1));
  await env.call("TaskService/SendMessage", { repository: repo, taskId: tasks.ready.id, holder: "a1", text: "Thanks, go ahead." }, ada.token);
  await until(page, "the second message", () => document.querySelectorAll('[data-testid="message"]').length === 2);
  assert.deepEqual(await texts(page, "message-author"), ["bob|b1", "ada|a1"], "oldest first");
  assert.equal(await page.evaluate(() => window.__marker), 1, "the page was reloaded");

  // The claimed task's page says who holds it, and how long for, counting down.
  await page.goto(`${env.url}/#/task/${tasks.claimed.id}`);
  const claim = await until(page, "the claimed task's claim", () =>
    document.querySelector('[data-testid="task-state"]')?.textContent === "claimed" &&
    document.querySelector('[data-testid="task-claim"]')?.textContent);
  assert.match(claim, /^bob\|b1, claim #1, since \S+ \S+: (9m [0-5]\ds|10m 00s) left$/);
  await until(page, "the claim's time left to count down", (was) =>
    document.querySelector('[data-testid="task-claim"]')?.textContent !== was, claim);

  // The waiting task's page links its dependencies.
  await page.goto(`${env.url}/#/task/${tasks.waiting.id}`);
  await until(page, "the waiting task's state", () =>
    document.querySelector('[data-testid="task-state"]')?.textContent === "open, waiting for its dependencies");
  const deps = await page.$$eval('[data-testid="task-depends-on"] a', (as) => as.map((a) => [a.textContent, a.getAttribute("href")]));
  assert.deepEqual(deps, [["Add the login form", `#/task/${tasks.ready.id}`], ["Write the sessions API", `#/task/${tasks.claimed.id}`]]);
  assert.equal(await page.getByTestId("thread-empty").textContent(), "No messages yet.");
  clean(page);
});

test("a change's page shows its task claim and its messages; the task's page links the change", async () => {
  await env.call("TaskService/SendMessage", { repository: repo, changeId: change.id, holder: "b1", text: `Nice fix ${xss}` }, bob.token);

  const page = watched(await env.signedIn(`/#/tasks/${repo}`, reader.token));
  await page.getByTestId("task-done").getByRole("link", { name: "Fix the build" }).click();
  await until(page, "the task done by the change", () =>
    document.querySelector('[data-testid="task-state"]')?.textContent === "done" &&
    document.querySelector('[data-testid="task-change"]'));
  assert.match(await page.getByTestId("task-claim").textContent(), /^ada\|a1, claim #1/);
  await page.getByTestId("task-change").click();
  await until(page, "the change page with its task claim", () => document.querySelector('[data-testid="change-task"]'));
  assert.equal(new URL(page.url()).hash, `#/change/${change.id}`);
  assert.equal(await page.getByTestId("change-task").textContent(), `${tasks.byChange.id}#1`);
  assert.equal(await page.getByTestId("change-task").getAttribute("href"), `#/task/${tasks.byChange.id}`);

  await until(page, "the change's message", () => document.querySelectorAll('[data-testid="message"]').length === 1);
  assert.deepEqual(await texts(page, "message-author"), ["bob|b1"]);
  assert.deepEqual(await texts(page, "message-text"), [`Nice fix ${xss}`]);
  assert.equal(await page.locator('[data-testid="thread"] img').count(), 0, "the message's HTML made an element");

  await env.call("TaskService/SendMessage", { repository: repo, changeId: change.id, holder: "a1", text: "Thank you." }, ada.token);
  await until(page, "the change's second message", () => document.querySelectorAll('[data-testid="message"]').length === 2);
  assert.deepEqual(await texts(page, "message-text"), [`Nice fix ${xss}`, "Thank you."]);
  clean(page);
});
