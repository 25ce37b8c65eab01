// The web console as a person sees it in a browser, against a real ag serve: signing in, leases
// appearing and expiring without a reload, breaking a lease (refused to a reader), and a change
// going through validation on a real worker to the mainline, or rejected with its output, and a
// change to a protected path waiting for a reviewer who approves it.
// Run with scripts/test-console.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Env, texts, until } from "./harness.mjs";

let env;

before(async () => {
  env = await Env.start();
});

after(async () => {
  await env?.stop();
});

// settled waits until the page made no request for half a second: a page that signs in with a
// saved token asks who it is, then follows the audit log, and never settles (5s then).
async function settled(page) {
  await page.waitForLoadState("networkidle", { timeout: 5_000 }).catch(() => {});
}

// noPageErrors checks that the page threw nothing uncaught.
function noPageErrors(page) {
  assert.deepEqual(page.errors, [], "the page threw uncaught errors");
}

test("log in: a wrong token is refused, the right one signs in for this tab only", async () => {
  const reader = await env.principal("rita", "reader");
  const page = await env.page("/");

  await page.getByTestId("token").fill("agt_not-a-token-of-this-server");
  await page.getByTestId("sign-in").click();
  const error = await page.getByTestId("error").textContent();
  assert.match(error, /^unauthenticated: bearer token is unknown/, "the error names the refusal");
  assert.equal(await page.getByTestId("who").count(), 0, "no console after a refused token");
  assert.equal(await page.getByTestId("sign-out").count(), 0, "no console after a refused token");

  await page.getByTestId("token").fill(reader.token);
  await page.getByTestId("sign-in").click();
  await page.getByTestId("who").waitFor();
  assert.match(await page.getByTestId("who").textContent(), /^rita · reader/);
  assert.equal(await page.getByTestId("error").count(), 0, "the refusal is gone once signed in");

  // Reloading the tab keeps the session: the token is in the tab's sessionStorage.
  await page.reload();
  await page.getByTestId("who").waitFor();
  assert.match(await page.getByTestId("who").textContent(), /^rita · reader/);
  assert.equal(await page.getByTestId("token").count(), 0, "a reloaded tab is still signed in");

  // A new tab is not signed in: neither one of the same browser window (which shares its
  // localStorage), nor one of a new browser context.
  for (const [what, other] of [
    ["a new tab of the same window", await env.page("/", page.context())],
    ["a new browser context", await env.page("/")],
  ]) {
    await settled(other);
    assert.equal(await other.getByTestId("who").count(), 0, `${what} must not be signed in`);
    assert.equal(await other.getByTestId("token").count(), 1, `${what} asks for a token`);
    noPageErrors(other);
  }

  // Signing out forgets the token: a reload stays signed out.
  await page.getByTestId("sign-out").click();
  await page.getByTestId("token").waitFor();
  await page.reload();
  await settled(page);
  assert.equal(await page.getByTestId("who").count(), 0, "signed out, a reload must not sign in again");
  assert.equal(await page.getByTestId("token").count(), 1, "signed out, a reload asks for a token");

  noPageErrors(page);
});

test("a lease appears and expires on the repository page, live, without a reload", async () => {
  const repo = await env.repo("leases");
  const reader = await env.principal("rex", "reader");
  const agent = await env.agent("ann", repo);
  const page = await env.signedIn(`/#/repo/${repo}`, reader.token);
  await until(page, "the empty lease list", () => document.querySelector('[data-testid="lease-count"]')?.textContent === "0");
  await page.evaluate(() => {
    window.__marker = 1;
  });

  const lease = await agent.must(["--json", "lease", "acquire", "a.txt", "--ttl", "4s"]);
  assert.equal(lease.holder, agent.holder);
  await until(
    page,
    `a lease row of ${lease.holder} with fencing token ${lease.fencingToken}`,
    ([holder, token]) =>
      [...document.querySelectorAll('[data-testid="lease-row"]')].some(
        (r) => r.textContent.includes(holder) && r.querySelector('[data-testid="lease-token"]')?.textContent === token,
      ),
    [lease.holder, lease.fencingToken],
  );
  assert.deepEqual(await texts(page, "lease-count"), ["1"]);
  const [left] = await texts(page, "lease-left");
  assert.match(left, /^0m 0[1-4]s$/, "the time left counts down from the 4s lease");

  // The lease records no event when it expires: the page must notice by itself.
  await until(
    page,
    "the expired lease to leave the list",
    () =>
      document.querySelectorAll('[data-testid="lease-row"]').length === 0 &&
      document.querySelector('[data-testid="lease-count"]')?.textContent === "0",
  );
  assert.equal(await page.evaluate(() => window.__marker), 1, "the page was reloaded");
  noPageErrors(page);
});

test("breaking a lease: refused to a reader, done by an admin", async () => {
  const repo = await env.repo("breaking");
  const reader = await env.principal("ray", "reader");
  const agent = await env.agent("bob", repo);
  const lease = await agent.must(["--json", "lease", "acquire", "b.txt"]);
  const leaseRow = ([holder, token]) =>
    [...document.querySelectorAll('[data-testid="lease-row"]')].some(
      (r) => r.textContent.includes(holder) && r.querySelector('[data-testid="lease-token"]')?.textContent === token,
    );

  const asReader = await env.signedIn(`/#/repo/${repo}`, reader.token);
  await until(asReader, "the agent's lease row", leaseRow, [lease.holder, lease.fencingToken]);
  await asReader.getByTestId("break-lease").click();
  const refused = await until(asReader, "an error saying permission denied", () =>
    [...document.querySelectorAll('[data-testid="error"]')].map((e) => e.textContent).find((t) => t.includes("permission denied")),
  );
  assert.match(refused, /permission denied: principal ray has role reader/);
  assert.equal(await asReader.locator('[data-testid="lease-row"]').count(), 1, "the lease stays after the reader's refusal");
  const stillHeld = await agent.must(["--json", "lease", "list"]);
  assert.deepEqual((stillHeld.leases ?? []).map((l) => l.id), [lease.id], "the server still has the lease");

  const asAdmin = await env.signedIn(`/#/repo/${repo}`, env.adminToken);
  assert.match(await asAdmin.getByTestId("who").textContent(), /^admin · admin/);
  await until(asAdmin, "the agent's lease row", leaseRow, [lease.holder, lease.fencingToken]);
  await asAdmin.getByTestId("break-lease").click();
  const gone = () =>
    document.querySelectorAll('[data-testid="lease-row"]').length === 0 &&
    document.querySelector('[data-testid="lease-count"]')?.textContent === "0";
  await until(asAdmin, "the broken lease to leave the admin's page", gone);
  assert.equal(await asAdmin.getByTestId("error").count(), 0);
  // The reader's tab follows the audit log: the lease leaves it too, without a reload.
  await until(asReader, "the broken lease to leave the reader's page", gone);
  const held = await agent.must(["--json", "lease", "list"]);
  assert.deepEqual(held.leases ?? [], [], "the server still lists the broken lease");

  noPageErrors(asReader);
  noPageErrors(asAdmin);
});

// recordChange makes the change page record, at every change of the DOM, the change's state,
// its validation output and the heading above it (which holds the job's progress line).
function recordChange(page) {
  return page.evaluate(() => {
    window.__seen = [];
    const snap = () => {
      const out = document.querySelector('[data-testid="job-output"]');
      const now = {
        state: document.querySelector('[data-testid="change-state"]')?.textContent ?? null,
        output: out?.textContent ?? null,
        heading: out?.previousElementSibling?.textContent ?? null,
      };
      const last = window.__seen[window.__seen.length - 1];
      if (!last || last.state !== now.state || last.output !== now.output || last.heading !== now.heading) {
        window.__seen.push({ at: Date.now(), ...now });
      }
    };
    new MutationObserver(snap).observe(document.body, { subtree: true, childList: true, characterData: true });
    snap();
  });
}

// integrateStarted starts `ag integrate` (which waits for the outcome) in the agent's checkout
// and answers the process and the change's id, once it said the change is queued.
async function integrateStarted(agent, message) {
  const p = agent.agStart(["integrate", "-m", message]);
  const [, id] = await p.waitOutput("stderr", /change (\S+): queued/);
  return { p, id };
}

test("a change goes from queued through validating to integrated, its output streaming", async (t) => {
  const repo = await env.repo("gated", ["sh", "-c", "echo step one; sleep 2; echo step two; sleep 2"]);
  const reader = await env.principal("rosa", "reader");
  const agent = await env.agent("cid", repo);
  await agent.must(["lease", "acquire", "c.txt"]);
  agent.write("c.txt", "c\n");
  const { p: integrate, id } = await integrateStarted(agent, "add c");

  // No worker yet: the change is queued (ag integrate said so), then its candidate waits for a
  // worker, already validating, with no output.
  const page = await env.signedIn(`/#/change/${id}`, reader.token);
  await recordChange(page);
  await until(page, "change-state validating with no output yet", () =>
    document.querySelector('[data-testid="change-state"]')?.textContent === "validating" &&
    document.querySelector('[data-testid="job-output"]')?.textContent === "(nothing yet)",
  );
  const worker = await env.worker("w-gated");
  t.after(() => worker.stop());

  await t.test("the validation output shows while the change validates", async () => {
    const seen = await until(page, "job-output with step one while validating, or the change's end", () => {
      const state = document.querySelector('[data-testid="change-state"]')?.textContent;
      const output = document.querySelector('[data-testid="job-output"]')?.textContent ?? "";
      if (state === "validating" && output.includes("step one")) return { live: true };
      if (state === "integrated" || state === "rejected") return { live: false, state, output };
      return null;
    });
    assert.ok(seen.live, `the change was ${seen.state} before its output showed while it validated; ` +
      `the page went through: ${JSON.stringify(await page.evaluate(() => window.__seen), null, 1)}`);
  });

  await until(page, "change-state integrated with its attestation", () =>
    document.querySelector('[data-testid="change-state"]')?.textContent === "integrated" &&
    document.querySelector('[data-testid="change-attestation"]')?.textContent.startsWith("sha256:"),
  );
  await until(page, "the whole validation output", () =>
    /step one\s+step two/.test(document.querySelector('[data-testid="job-output"]')?.textContent ?? ""),
  );
  const seen = await page.evaluate(() => window.__seen);
  const states = seen.map((s) => s.state).filter((s, i, all) => s !== null && s !== all[i - 1]);
  // The page may open before the gate made the change a candidate: queued first, then.
  assert.deepEqual(states.filter((s, i) => i > 0 || s !== "queued"), ["validating", "integrated"],
    `the states the page showed: ${JSON.stringify(seen, null, 1)}`);

  const done = await integrate.wait();
  assert.equal(done.code, 0, `ag integrate: exit ${done.code}\n${done.stdout}\n${done.stderr}`);
  const [attestation] = await texts(page, "change-attestation");
  assert.match(done.stdout, new RegExp(`^change ${id} integrated: 1 paths, mainline \\S+\nvalidated: attestation ${attestation}\n$`),
    "the page shows the attestation ag integrate printed");

  // The change's edits, as a diff against its base: c.txt added with its one line.
  await page.getByTestId("show-diff").click();
  await page.getByTestId("diff-file").waitFor();
  const diff = await page.getByTestId("diff-file").textContent();
  assert.match(diff, /^c\.txt\s*added@@ -1,0 \+1,1 @@\n\+c\n$/, `the diff shown: ${JSON.stringify(diff)}`);
  noPageErrors(page);
});

test("a rejected change shows its failing output", async (t) => {
  const repo = await env.repo("strict", [
    "sh", "-c", 'if grep -rn broken .; then echo "FAIL: something is broken"; exit 1; fi; echo "nothing broken"',
  ]);
  const reader = await env.principal("remy", "reader");
  const agent = await env.agent("dan", repo);
  const worker = await env.worker("w-strict");
  t.after(() => worker.stop());
  await agent.must(["lease", "acquire", "d.txt"]);
  agent.write("d.txt", "this is broken\n");
  const { p: integrate, id } = await integrateStarted(agent, "break d");

  const page = await env.signedIn(`/#/change/${id}`, reader.token);
  await until(page, "change-state rejected", () => document.querySelector('[data-testid="change-state"]')?.textContent === "rejected");
  const reason = await until(page, "the change's reason", () => document.querySelector('[data-testid="change-reason"]')?.textContent);
  assert.match(reason, /this is broken/, "the reason holds the command's output");
  assert.match(reason, /FAIL: something is broken/, "the reason holds the command's output");

  const done = await integrate.wait();
  assert.equal(done.code, 5, `ag integrate: exit ${done.code}\n${done.stdout}\n${done.stderr}`);
  assert.match(done.stdout, new RegExp(`^change ${id} rejected: 1 paths; the mainline did not move\n`));
  noPageErrors(page);
});

test("a change to a protected path waits for a reviewer, who approves it on its page", async (t) => {
  // The policy runs check.sh, which is protected without being named: a change that adds it is
  // validated (the mainline has none yet, so with its own), then waits for an approval.
  const repo = await env.repo("guarded", ["sh", "check.sh"]);
  const agent = await env.agent("gus", repo);
  const reviewer = await env.principal("riva", "reviewer");
  const worker = await env.worker("w-guarded");
  t.after(() => worker.stop());
  await agent.must(["lease", "acquire", "check.sh"]);
  agent.write("check.sh", "echo checked\n");
  const { p: integrate, id } = await integrateStarted(agent, "add the check");

  const mine = await env.signedIn(`/#/change/${id}`, agent.token);
  await until(mine, "change-state awaiting approval", () =>
    document.querySelector('[data-testid="change-state"]')?.textContent === "awaiting approval");
  assert.equal(await mine.getByTestId("change-protected").textContent(), "check.sh");
  assert.match(await mine.getByTestId("change-approved-by").textContent(), /^nobody yet/);
  await mine.getByTestId("approve-change").click();
  const refusal = await until(mine, "the refusal of the agent's own approval", () =>
    document.querySelector('[data-testid="error"]')?.textContent);
  assert.match(refusal, /^approve: permission denied: principal gus has role agent/, "an agent may not approve a change");

  const page = await env.signedIn(`/#/change/${id}`, reviewer.token);
  await page.getByTestId("approve-change").click();
  await until(page, "change-state integrated, approved by riva", () =>
    document.querySelector('[data-testid="change-state"]')?.textContent === "integrated" &&
    document.querySelector('[data-testid="change-approved-by"]')?.textContent.startsWith("riva, "));
  const done = await integrate.wait();
  assert.equal(done.code, 0, `ag integrate: exit ${done.code}\n${done.stdout}\n${done.stderr}`);
  assert.match(done.stdout, new RegExp(`^change ${id} integrated: 1 paths`));
  noPageErrors(page);
});
