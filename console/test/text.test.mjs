// Text an agent controls, as a person sees it in the console: a change's message, the path it
// edits, the file's content in the diff, and the output its validation printed, which is the
// reason it was rejected, are shown as the characters they are. HTML among them makes no element
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
