// Text an agent controls, as a person sees it in the console: a change's message, the path it
// edits, the file's content in the diff, and the output its validation printed, which is the
// reason it was rejected; a task's title, body and paths, and the messages of a task's and a
// change's threads, are shown as the characters they are. HTML among them makes no element
// of the page (SECURITY.md: React writes every agent-controlled string as text). Run with
// scripts/test-console.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Env, until } from "./harness.mjs";

let env;

before(async () => {
  env = await Env.start();
});

after(async () => {
  await env?.stop();
});

// markup answers HTML that, written into the page as HTML, would be an element with the id
// from-<where> (and run script, were the page's policy to let inline handlers run).
const markup = (where) => `<img src=x id=from-${where} onerror="document.title='from ${where}'">`;

// noMarkup checks that none of the agent's HTML became an element of the page.
async function noMarkup(page, where) {
  const made = await page.evaluate(() =>
    [...document.querySelectorAll('img, [id^="from-"]')].map((e) => e.outerHTML),
  );
  assert.deepEqual(made, [], `the agent's HTML became elements of the ${where}`);
  assert.doesNotMatch(await page.title(), /^from /, `the agent's HTML ran script on the ${where}`);
}

test("agent text that is HTML shows as text, never as HTML", async (t) => {
  const path = `${markup("path")}.txt`;
  const message = markup("message");
  const content = markup("content");
  // The validation prints the file, so its output (and the reason the change is rejected) is
  // the agent's too.
  const repo = await env.repo("markup", ["sh", "-c", 'cat ./*.txt; echo "FAIL: markup"; exit 1']);
  const reader = await env.principal("rhea", "reader");
  const agent = await env.agent("eve", repo);
  const worker = await env.worker("w-markup");
  t.after(() => worker.stop());
  await agent.must(["lease", "acquire", path]);
  agent.write(path, content + "\n");
  const integrate = agent.agStart(["integrate", "-m", message]);
  const [, id] = await integrate.waitOutput("stderr", /change (\S+): queued/);

  const page = await env.signedIn(`/#/change/${id}`, reader.token);
  await until(page, "change-state rejected", () => document.querySelector('[data-testid="change-state"]')?.textContent === "rejected");
  const facts = await page.evaluate(() =>
    Object.fromEntries([...document.querySelectorAll("dl.facts dt")].map((dt) => [dt.textContent, dt.nextElementSibling?.textContent])),
  );
  assert.equal(facts.message, message, "the change's message, as the agent wrote it");
  assert.equal(facts.paths, path, "the change's path, as the agent named it");
  const reason = await until(page, "the change's reason", () => document.querySelector('[data-testid="change-reason"]')?.textContent);
  assert.ok(reason.includes(content), `the reason shows the validation's output as it printed it: ${JSON.stringify(reason)}`);
  const output = await until(page, "the validation output", () =>
    /FAIL: markup/.test(document.querySelector('[data-testid="job-output"]')?.textContent ?? "") &&
    document.querySelector('[data-testid="job-output"]').textContent,
  );
  assert.ok(output.includes(content), `the validation output as it printed it: ${JSON.stringify(output)}`);
  await page.getByTestId("show-diff").click();
  await page.getByTestId("diff-file").waitFor();
  const diff = await page.getByTestId("diff-file").textContent();
  assert.ok(diff.startsWith(path) && diff.includes("+" + content + "\n"), `the diff shows the path and the line as written: ${JSON.stringify(diff)}`);
  await noMarkup(page, "change page");

  // The repository page lists the change by its message and the lease by its path.
  const repoPage = await env.signedIn(`/#/repo/${repo}`, reader.token, page.context());
  await until(
    repoPage,
    "the change's message and the lease's path, as text",
    ([message, path]) => {
      const rows = (id) => [...document.querySelectorAll(`[data-testid="${id}"]`)].map((r) => r.textContent);
      return rows("change-row").some((r) => r.includes(message)) && rows("lease-row").some((r) => r.includes(path));
    },
    [message, path],
  );
  await noMarkup(repoPage, "repository page");

  const done = await integrate.wait();
  assert.equal(done.code, 5, `ag integrate: exit ${done.code}\n${done.stdout}\n${done.stderr}`);
  assert.deepEqual(page.errors, [], "the change page threw uncaught errors");
  assert.deepEqual(repoPage.errors, [], "the repository page threw uncaught errors");
});

test("a task's title, body and paths and the messages on threads show as text, never as HTML", async () => {
  const repo = await env.repo("markup-tasks");
  const reader = await env.principal("ruth", "reader");
  const agent = await env.principal("tess", "agent");
  const title = markup("title");
  const body = `${markup("body")}\n<script>document.title = "from body"</script>`;
  const taskPath = `${markup("task-path")}.txt`;
  const { task } = await env.call("TaskService/CreateTask", { repository: repo, title, body, paths: [taskPath] }, agent.token);
  const { task: claimed } = await env.call("TaskService/ClaimTask", { repository: repo, taskId: task.id, holder: "t1" }, agent.token);
  const change = await env.integrateFile(agent.token, {
    repository: repo, label: "t1", path: "t.txt", content: "t\n", message: markup("change-message"),
    taskId: task.id, taskClaimNumber: claimed.claimNumber,
  });
  assert.equal(change.state, "CHANGE_STATE_INTEGRATED", JSON.stringify(change));
  const onTask = markup("task-thread");
  const onChange = markup("change-thread");
  await env.call("TaskService/SendMessage", { repository: repo, taskId: task.id, holder: "t1", text: onTask }, agent.token);
  await env.call("TaskService/SendMessage", { repository: repo, changeId: change.id, holder: "t1", text: onChange }, agent.token);

  const page = await env.signedIn(`/#/tasks/${repo}`, reader.token);
  const row = await until(page, "the done task's row", () => document.querySelector('[data-testid="task-done"]')?.textContent);
  assert.ok(row.startsWith(title), `the Tasks page shows the title as written: ${JSON.stringify(row)}`);
  await noMarkup(page, "Tasks page");

  await page.goto(`${env.url}/#/task/${task.id}`);
  await until(page, "the task's thread", () => document.querySelector('[data-testid="message-text"]'));
  const shown = await page.evaluate(() => ({
    title: document.querySelector('[data-testid="task-title"]')?.textContent,
    body: document.querySelector('[data-testid="task-body"]')?.textContent,
    paths: document.querySelector('[data-testid="task-paths"]')?.textContent,
    messages: [...document.querySelectorAll('[data-testid="message-text"]')].map((e) => e.textContent),
  }));
  assert.deepEqual(shown, { title, body, paths: taskPath, messages: [onTask] }, "the task page shows the agent's text as written");
  await noMarkup(page, "task page");

  await page.goto(`${env.url}/#/change/${change.id}`);
  // An empty list is no answer yet: the thread may come after the change's task line.
  const messages = await until(page, "the change's thread", () => {
    const texts = [...document.querySelectorAll('[data-testid="message-text"]')].map((e) => e.textContent);
    return document.querySelector('[data-testid="change-task"]') && texts.length > 0 && texts;
  });
  assert.deepEqual(messages, [onChange], "the change page shows its messages as written");
  await noMarkup(page, "change page");
  assert.deepEqual(page.errors, [], "the pages threw uncaught errors");
});
