// The console's audit verifier (src/verify.ts, what the browser runs) against exports that the
// Go audit package hashed and signed (internal/tools/auditfixture): it must accept exactly what
// `ag audit verify` accepts, events whose details only Go put in canonical form included, and
// refuse every tampering with a reason a person can act on.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const work = mkdtempSync(join(tmpdir(), "ag-console-verify-"));
test.after(() => rmSync(work, { recursive: true, force: true }));

async function verifier() {
  const out = join(work, "verify.mjs");
  await build({ entryPoints: [join(here, "..", "src", "verify.ts")], bundle: true, format: "esm", platform: "node",
    outfile: out, logLevel: "warning" });
  return import(out);
}

function fixture(seed) {
  const dir = mkdtempSync(join(work, `fixture-${seed}-`));
  const bin = process.env.AG_AUDITFIXTURE_BIN;
  const args = ["-out", dir, "-seed", String(seed), "-events", "300"];
  if (bin) execFileSync(bin, args);
  else execFileSync("go", ["run", "./internal/tools/auditfixture", ...args], { cwd: root });
  return {
    export: readFileSync(join(dir, "export.jsonl"), "utf8"),
    raw: readFileSync(join(dir, "raw.jsonl"), "utf8"),
    key: readFileSync(join(dir, "key.pub"), "utf8"),
  };
}

const v = await verifier();

test("exports signed by Go verify, for every seed", () => {
  for (const seed of [1, 2, 3, 4]) {
    const f = fixture(seed);
    const { events, note } = v.parseExport(f.export);
    const got = v.verifyEvents(events, note, v.parseVerifierKey(f.key));
    assert.deepEqual({ ok: got.ok, reason: got.reason, size: got.size, events: got.events }, { ok: true, reason: "", size: 270, events: 300 });
  }
});

test("details as stored, out of order, repeated and escaped, are put in Go's canonical form", () => {
  const f = fixture(5);
  const { note } = v.parseExport(f.export);
  const events = f.raw.trim().split("\n").map((line) => {
    const e = JSON.parse(line);
    return { seq: e.seq, time: e.time, principal: e.principal, holder: e.holder, action: e.action, subject: e.subject,
      details: e.details_json, prevHash: v.fromHex(e.prev_hash), hash: v.fromHex(e.hash) };
  });
  assert.ok(events.some((e) => /"\s*[,:]\s|\\u/.test(e.details)), "the fixture holds details that are not canonical as written");
  const got = v.verifyEvents(events, note, v.parseVerifierKey(f.key));
  assert.equal(got.reason, "");
  assert.equal(got.ok, true);
});

test("every tampering is refused, saying where", () => {
  const f = fixture(6);
  const other = fixture(7);
  const key = v.parseVerifierKey(f.key);
  const lines = f.export.trim().split("\n");
  const events = lines.slice(0, -1);
  const checkpoint = lines.at(-1);
  const note = JSON.parse(checkpoint).checkpoint;
  const withNote = (n) => [...events, JSON.stringify({ checkpoint: n })].join("\n");
  const cases = [
    ["an event's details changed", [...events.slice(0, 9), events[9].replace(/"subject":"job\/job_9"/, '"subject":"job/job_X"'), ...events.slice(10), checkpoint].join("\n"), /event 10: its hash does not match/],
    ["an event removed", [...events.slice(0, 4), ...events.slice(5), checkpoint].join("\n"), /event 6: its seq is 6|event 5: its seq is 6/],
    ["two events swapped", [...events.slice(0, 3), events[4], events[3], ...events.slice(5), checkpoint].join("\n"), /seq/],
    ["the checkpoint's size changed", withNote(note.replace(/^(.*\n)270\n/, "$1269\n")), /signature does not verify/],
    ["the signature changed", withNote(note.replace(/ (\S)(\S+)\n$/, (_, a, b) => ` ${a === "A" ? "B" : "A"}${b}\n`)), /signature does not verify|no signature/],
    ["no checkpoint", events.join("\n"), /no checkpoint line/],
  ];
  for (const [what, text, want] of cases) {
    let got;
    try {
      const { events: es, note: n } = v.parseExport(text);
      got = v.verifyEvents(es, n, key);
    } catch (err) {
      got = { ok: false, reason: err.message };
    }
    assert.equal(got.ok, false, `${what}: verified`);
    assert.match(got.reason, want, `${what}: ${got.reason}`);
  }
  const otherKey = v.verifyEvents(...Object.values(v.parseExport(f.export)), v.parseVerifierKey(other.key));
  assert.equal(otherKey.ok, false);
  assert.match(otherKey.reason, /no signature by the key|does not verify/);
  assert.throws(() => v.parseVerifierKey(f.key.trim().replace(/\+([0-9a-f]{8})\+/, (_, h) => `+${h.startsWith("0") ? "1" : "0"}${h.slice(1)}+`)),
    /does not match its name and key/);
});
