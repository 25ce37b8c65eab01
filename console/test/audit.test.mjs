// The Audit page against a real ag serve: the log verified in the browser with the key a person
// pastes (the server's own log, an export, a tampered or cut export, another server's key, a
// malformed key), each verdict checked against Go's `ag audit verify`; the key pinned in the
// browser across a reload; and the log growing on the page, without a reload, and filtered.
// Run with scripts/test-console.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Env, texts, until } from "./harness.mjs";

let env;
let key; // the server's verifier key, as ag serve wrote it beside its database

before(async () => {
  env = await Env.start();
  key = readFileSync(env.auditKeyFile, "utf8").trim();
});

after(async () => {
  await env?.stop();
});

function noPageErrors(page) {
  assert.deepEqual(page.errors, [], "the page threw uncaught errors");
}

// verdict does act (which makes the page verify something) and answers the verdict it then
// shows: a new verify-result element, not the one shown before (the page removes the verdict
// when it starts verifying, and shows a new one when it is done).
async function verdict(page, what, act) {
  await page.evaluate(() => {
    for (const e of document.querySelectorAll('[data-testid="verify-result"]')) e.dataset.before = "1";
  });
  await act();
  return until(page, `the verdict on ${what}`, () => {
    const e = document.querySelector('[data-testid="verify-result"]');
    return e && !e.dataset.before ? e.textContent : null;
  });
}

const verifyServer = (page) => verdict(page, "the server's log", () => page.getByTestId("verify-server").click());
const verifyFile = (page, file) => verdict(page, file, () => page.getByTestId("export-file").setInputFiles(file));

// goVerify runs `ag audit verify` with the key file: of the export file, or of the server's log
// (remembering its checkpoint in a state file of the test's own, not the user's). It answers
// {code, stdout, stderr}, stdout parsed when it is JSON.
async function goVerify(keyFile, file) {
  const args = ["--json", "audit", "verify", "--key", keyFile];
  args.push(...(file ? ["--file", file] : ["--state", join(env.tmp("state"), "audit.json")]));
  const r = await env.ag(args);
  let out = r.stdout;
  try {
    out = JSON.parse(r.stdout);
  } catch {}
  return { code: r.code, out, stderr: r.stderr };
}

test("a reader verifies the server's log in the browser, with the count ag audit verify gives", async () => {
  const reader = await env.principal("rhea", "reader");
  const page = await env.signedIn("/#/audit", reader.token);
  await page.getByTestId("audit-key").fill(key);
  assert.equal(await page.getByTestId("key-error").count(), 0);

  // The log grows as the server seals events: the page's verdict and Go's must be about the same
  // checkpoint. Go's runs after the page's, so an equal size means the log did not move between.
  let shown;
  let go;
  for (let attempt = 1; ; attempt++) {
    shown = await verifyServer(page);
    go = await goVerify(env.auditKeyFile);
    assert.equal(go.code, 0, `ag audit verify: exit ${go.code}\n${JSON.stringify(go.out)}\n${go.stderr}`);
    assert.equal(go.out.verified, true);
    if (shown.includes(`The checkpoint of ${go.out.checkpointSize} events`) || attempt === 5) break;
  }
  assert.ok(go.out.checkpointSize >= 4, `a checkpoint of ${go.out.checkpointSize} events: the admin's and rhea's are 4`);
  assert.equal(
    shown,
    `the server's log: verified. The checkpoint of ${go.out.checkpointSize} events (origin ${go.out.origin}) is signed by the key, ` +
      "and every event up to it hashes to it.",
  );
  noPageErrors(page);
});

test("an export verifies in the browser; tampered or cut short it does not, and Go agrees on each", async () => {
  const reader = await env.principal("ravi", "reader");
  const dir = env.tmp("exports");
  const exported = join(dir, "audit.jsonl");
  // The export holds sealed events: ravi's creation is in it once the sealer got to it.
  let lines = [];
  for (let i = 0; i < 100; i++) {
    await env.must(["audit", "export", "--out", exported], { token: reader.token });
    lines = readFileSync(exported, "utf8").trim().split("\n");
    if (lines.some((l) => l.includes('"subject":"principal/ravi"'))) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const checkpoint = lines.at(-1);
  const events = lines.slice(0, -1);
  assert.match(checkpoint, /^\{"checkpoint":/);
  const size = events.length;

  // Tampered: ravi, created a reader, made an admin in the export, the JSON still valid.
  const at = events.findIndex((l) => l.includes('"action":"principal.created","subject":"principal/ravi"'));
  assert.ok(at >= 0, "the export holds ravi's creation");
  const seq = JSON.parse(events[at]).seq;
  const forged = events[at].replace('"details":{"role":"reader"}', '"details":{"role":"admin"}');
  assert.notEqual(forged, events[at]);
  JSON.parse(forged);

  const files = {
    "audit.jsonl": null,
    "audit-tampered.jsonl": [...events.slice(0, at), forged, ...events.slice(at + 1), checkpoint],
    "audit-no-checkpoint.jsonl": events,
    "audit-last-event-cut.jsonl": [...events.slice(0, -1), checkpoint],
  };
  for (const [name, content] of Object.entries(files)) {
    if (content) writeFileSync(join(dir, name), content.join("\n") + "\n");
  }

  const page = await env.signedIn("/#/audit", reader.token);
  await page.getByTestId("audit-key").fill(key);

  const want = {
    "audit.jsonl": [0, `audit.jsonl: verified. The checkpoint of ${size} events (origin ag) is signed by the key, and every event up to it hashes to it.`],
    "audit-tampered.jsonl": [1, `audit-tampered.jsonl: does not verify. event ${seq}: its hash does not match its contents: the event was altered`],
    "audit-no-checkpoint.jsonl": [1, "audit-no-checkpoint.jsonl: does not verify. the export has no checkpoint line: it is cut short"],
    "audit-last-event-cut.jsonl": [1, `audit-last-event-cut.jsonl: does not verify. the checkpoint covers ${size} events, and only ${size - 1} were read`],
  };
  for (const [name, [code, text]] of Object.entries(want)) {
    const file = join(dir, name);
    assert.equal(await verifyFile(page, file), text, name);
    const go = await goVerify(env.auditKeyFile, file);
    assert.equal(go.code, code, `ag audit verify --file ${name}: exit ${go.code}\n${JSON.stringify(go.out)}\n${go.stderr}`);
    if (name === "audit.jsonl") assert.equal(go.out.checkpointSize, size);
    if (name === "audit-tampered.jsonl") assert.match(go.stderr, new RegExp(`event ${seq}: hash does not match`), "Go names the same event");
  }
  noPageErrors(page);
});

test("another server's key does not verify this log; a malformed key is refused before verifying", async () => {
  const other = await Env.start({ browser: false });
  let otherKey;
  try {
    otherKey = readFileSync(other.auditKeyFile, "utf8").trim();
  } finally {
    await other.stop();
  }
  const otherKeyFile = join(env.tmp("other-key"), "audit.key.pub");
  writeFileSync(otherKeyFile, otherKey + "\n");
  const [name, hash] = otherKey.split("+");
  assert.equal(name, "ag", "both servers have the origin ag: only the key tells them apart");
  assert.notEqual(otherKey, key);

  const reader = await env.principal("rory", "reader");
  const exported = join(env.tmp("exports"), "audit.jsonl");
  await env.must(["audit", "export", "--out", exported], { token: reader.token });
  const page = await env.signedIn("/#/audit", reader.token);
  await page.getByTestId("audit-key").fill(otherKey);
  assert.equal(await page.getByTestId("key-error").count(), 0, "another server's key is a well-formed key");

  const refusal = `does not verify. the checkpoint carries no signature by the key ag+${hash}`;
  assert.equal(await verifyServer(page), `the server's log: ${refusal}`);
  assert.equal(await verifyFile(page, exported), `audit.jsonl: ${refusal}`);
  for (const file of [undefined, exported]) {
    const go = await goVerify(otherKeyFile, file);
    assert.notEqual(go.code, 0, `ag audit verify ${file ? "--file" : "(the server's log)"} with the other key: exit 0`);
    assert.match(go.stderr, new RegExp(`not by key ag\\+${hash}`));
  }

  const buttons = ["verify-server", "export-file", "pin-key"];
  const disabled = () => Promise.all(buttons.map((id) => page.getByTestId(id).isDisabled()));
  const flipped = key.replace(/^ag\+(.)/, (_, c) => `ag+${c === "0" ? "1" : "0"}`);
  for (const [what, bad, error] of [
    ["a hash digit changed", flipped, /^the key's hash does not match its name and key: it was altered$/],
    ["a key cut short", key.slice(0, -6), /^the key is not an Ed25519 note key$/],
    ["not a key", "ag audit verify --key audit.key.pub", /^a verifier key is <name>\+<hash>\+<key>/],
  ]) {
    await page.getByTestId("audit-key").fill(bad);
    assert.match(await page.getByTestId("key-error").textContent(), error, what);
    assert.deepEqual(await disabled(), [true, true, true], `${what}: verify-server, export-file and pin-key are disabled`);
  }
  await page.getByTestId("audit-key").fill(key);
  await page.getByTestId("key-error").waitFor({ state: "detached" });
  assert.deepEqual(await disabled(), [false, false, false], "the right key enables verifying and pinning again");
  noPageErrors(page);
});

test("a pinned key stays in the browser across a reload and in its new tabs, not in another browser", async () => {
  const reader = await env.principal("rena", "reader");
  const page = await env.signedIn("/#/audit", reader.token);
  assert.equal(await page.getByTestId("audit-key").inputValue(), "", "no key pinned yet");
  await page.getByTestId("audit-key").fill("  " + key + "\n");
  const pin = page.getByTestId("pin-key");
  assert.equal(await pin.textContent(), "Pin in this browser");
  await pin.click();
  await until(page, "the pin button to say it is pinned", () => document.querySelector('[data-testid="pin-key"]')?.textContent === "Pinned in this browser");
  assert.equal(await pin.isDisabled(), true, "a pinned key cannot be pinned again");

  await page.reload();
  await page.getByTestId("who").waitFor();
  await until(page, "the pinned key in the textarea", (k) => document.querySelector('[data-testid="audit-key"]')?.value === k, key);
  assert.equal(await pin.textContent(), "Pinned in this browser");
  assert.match(await verifyServer(page), /^the server's log: verified\./, "the pinned key verifies after the reload");

  // A new tab of the same browser asks for the token again, and has the key.
  const tab = await env.signedIn("/#/audit", reader.token, page.context());
  assert.equal(await tab.getByTestId("audit-key").inputValue(), key);
  // Another browser (a new context: its own localStorage) has none.
  const elsewhere = await env.signedIn("/#/audit", reader.token);
  assert.equal(await elsewhere.getByTestId("audit-key").inputValue(), "");
  for (const p of [page, tab, elsewhere]) noPageErrors(p);
});

test("the log grows on the page without a reload, and the filters narrow it", async () => {
  const reader = await env.principal("rosa", "reader");
  const page = await env.signedIn("/#/audit", reader.token);
  await until(page, "the log, followed live", () =>
    document.querySelectorAll('[data-testid="audit-row"]').length > 0 && [...document.querySelectorAll("h3")].some((h) => h.textContent.startsWith("As it grows") && h.querySelector(".count")?.textContent === "live"),
  );
  await page.evaluate(() => {
    window.__marker = 1;
  });
  // row answers the audit rows' cells: seq, time, actor, action, subject, details.
  const rows = () => page.$$eval('[data-testid="audit-row"]', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
  const rowOf = ([action, subject]) =>
    [...document.querySelectorAll('[data-testid="audit-row"]')].some((tr) => tr.cells[3]?.textContent === action && tr.cells[4]?.textContent === subject);

  await env.principal("nova", "agent");
  await until(page, "a principal.created row of principal/nova", rowOf, ["principal.created", "principal/nova"]);
  const all = await rows();
  const top = all[0];
  assert.deepEqual(top.slice(2, 4), ["admin", "token.created"], "the newest event first: nova's token");
  assert.deepEqual(all[1].slice(2, 6), ["admin", "principal.created", "principal/nova", '{"role":"agent"}']);
  assert.ok(Number(all[0][0]) > Number(all[1][0]), "newest first");

  await page.getByTestId("filter-subject").fill("principal/nova");
  await until(page, "only nova's rows", () =>
    [...document.querySelectorAll('[data-testid="audit-row"]')].every((tr) => tr.cells[4]?.textContent === "principal/nova"),
  );
  assert.deepEqual((await rows()).map((r) => r[3]), ["principal.created"]);

  // A new event of the filtered subject shows under the filter, live.
  await env.must(["principal", "disable", "nova"]);
  await until(page, "a principal.disabled row of principal/nova", rowOf, ["principal.disabled", "principal/nova"]);
  assert.deepEqual((await rows()).map((r) => r[3]), ["principal.disabled", "principal.created"]);

  // The actor filter too; a filter nothing matches leaves no row.
  await page.getByTestId("filter-subject").fill("");
  await page.getByTestId("filter-actor").fill("rhea");
  await until(page, "no row after the actor filter rhea", () => document.querySelectorAll('[data-testid="audit-row"]').length === 0);
  await page.getByTestId("filter-actor").fill("admin");
  await page.getByTestId("filter-subject").fill("principal/");
  await until(page, "the admin's principal rows", () => {
    const trs = [...document.querySelectorAll('[data-testid="audit-row"]')];
    return trs.length > 0 && trs.every((tr) => tr.cells[2]?.textContent === "admin" && tr.cells[4]?.textContent.startsWith("principal/"));
  });
  const subjects = (await rows()).map((r) => r[4]);
  for (const name of ["nova", "rosa"]) assert.ok(subjects.includes(`principal/${name}`), `principal/${name} among ${subjects}`);

  assert.equal(await page.evaluate(() => window.__marker), 1, "the page was reloaded");
  assert.deepEqual(await texts(page, "key-error"), []);
  noPageErrors(page);
});
