// The official TypeScript MCP client (@modelcontextprotocol/sdk) against the real `ag mcp`
// binary over stdio, as an MCP host runs it: `ag mcp` in the agent's checkout with AG_TOKEN and
// AG_SERVER in its environment, over a real `ag serve` on a free port with a fresh SQLite store.
// The client checks every structured result against the tool's output schema; the test checks
// what the results say and that none of them shows the agent's token.
//
//   AG_BIN=/path/to/ag node --test mcp.test.mjs     (scripts/test-mcp-ts builds ag and runs this)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { bin, call, connect, env, ok, principal, run, startServer } from "./harness.mjs";

const dir = mkdtempSync(join(tmpdir(), "ag-mcp-ts-"));
let server; // startServer's
let alice; // connect's
let bobToken;

before(async () => {
  server = await startServer(dir);
  const src = join(dir, "src");
  mkdirSync(src);
  writeFileSync(join(src, "hello.txt"), "hello\n");
  writeFileSync(join(src, "other.txt"), "other\n");
  await server.ag(server.adminToken, "repo", "import", "app", src);

  const token = await principal(server, "alice");
  bobToken = await principal(server, "bob");
  const checkout = join(dir, "alice");
  await server.ag(token, "checkout", "app", checkout, "--holder", "ts");
  alice = await connect(server, token, checkout);
});

after(async () => {
  await alice?.client.close();
  server?.proc.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

test("lists the tools, each with an input and an output schema", async () => {
  const { tools } = await alice.client.listTools();
  const names = tools.map((t) => t.name).sort();
  for (const want of ["change_show", "integrate", "job_list", "job_show", "lease_acquire", "lease_list", "lease_release", "lease_renew", "status", "sync"]) {
    assert.ok(names.includes(want), `tools ${names} lack ${want}`);
  }
  for (const t of tools) {
    assert.equal(t.inputSchema.type, "object", `${t.name}'s input schema`);
    assert.equal(t.outputSchema?.type, "object", `${t.name}'s output schema`);
  }
});

test("status, lease_acquire, integrate: an edit reaches the mainline under a lease", async () => {
  let st = await ok(alice, "status");
  assert.equal(st.repository, "app");
  assert.equal(st.holder, "ts");
  assert.equal(st.behind, false);
  assert.deepEqual(st.edits, []);
  assert.deepEqual(st.leases, []);

  const { lease } = await ok(alice, "lease_acquire", { paths: ["hello.txt"], ttl: "2m" });
  assert.equal(lease.holder, "alice|ts");
  assert.equal(lease.state, "active");
  assert.deepEqual(lease.paths, ["hello.txt"]);
  assert.ok(lease.fencing_token > 0 && lease.seconds_left > 60, JSON.stringify(lease));

  writeFileSync(join(alice.dir, "hello.txt"), "hello from TypeScript\n");
  st = await ok(alice, "status");
  assert.deepEqual(st.edits, [{ path: "hello.txt", kind: "modified", mode: "100644", base_mode: "100644" }]);
  assert.deepEqual(st.unleased, []);
  assert.equal(st.leases[0].id, lease.id);

  const { change, synced } = await ok(alice, "integrate", { message: "Greet from TypeScript" });
  assert.equal(change.state, "integrated");
  assert.deepEqual(change.paths, ["hello.txt"]);
  assert.equal(change.author, "alice|ts");
  assert.match(change.integrated_revision, /^rev_/);
  assert.equal(synced, true);

  st = await ok(alice, "status");
  assert.equal(st.base_revision, change.integrated_revision);
  assert.equal(st.mainline, change.integrated_revision);
  assert.deepEqual(st.edits, []);

  const read = await alice.client.readResource({ uri: "ag://app/mainline/hello.txt" });
  alice.seen.push(JSON.stringify(read));
  assert.equal(read.contents[0].text, "hello from TypeScript\n");
  const { released } = await ok(alice, "lease_release", {});
  assert.deepEqual(released.map((l) => l.id), [lease.id]);
});

test("a lease another agent holds is refused with a tool error naming the holder", async () => {
  const bobDir = join(dir, "bob");
  await server.ag(bobToken, "checkout", "app", bobDir, "--holder", "cli");
  await run(bin, ["lease", "acquire", "other.txt", "--server", server.url], { cwd: bobDir, env: env({ AG_TOKEN: bobToken }) });

  const res = await call(alice, "lease_acquire", { paths: ["other.txt"] });
  assert.equal(res.isError, true);
  const text = res.content.map((c) => c.text).join("\n");
  assert.match(text, /other\.txt is leased to bob\|cli/);
  assert.match(text, /lease_acquire with wait/);
});

test("paths outside the checkout or into .git are refused", async () => {
  for (const path of ["../x", ".git/config", "/etc/passwd"]) {
    const res = await call(alice, "lease_acquire", { paths: [path] });
    assert.equal(res.isError, true, `lease_acquire ${path}`);
    assert.match(res.content[0].text, /relative to the checkout's root/);
  }
  await assert.rejects(alice.client.readResource({ uri: "ag://app/mainline/.git/config" }));
});

test("no answer shows the agent's token", () => {
  assert.ok(alice.seen.length > 5);
  for (const text of alice.seen) assert.ok(!text.includes(alice.token), `an answer holds the token: ${text}`);
  // The checkout's state on disk has no token either: it names the server and the leases.
  assert.ok(!readFileSync(join(alice.dir, ".ag", "checkout.json"), "utf8").includes(alice.token));
});
