// The official TypeScript MCP client (@modelcontextprotocol/sdk) against the real `ag mcp`
// binary over stdio, as an MCP host runs it: `ag mcp` in the agent's checkout with AG_TOKEN and
// AG_SERVER in its environment, over a real `ag serve` on a free port with a fresh SQLite store.
// The client checks every structured result against the tool's output schema; the test checks
// what the results say and that none of them shows the agent's token.
//
//   AG_BIN=/path/to/ag node --test mcp.test.mjs     (scripts/test-mcp-ts builds ag and runs this)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { setTimeout as delay } from "node:timers/promises";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const run = promisify(execFile);
const bin = process.env.AG_BIN ? resolve(process.env.AG_BIN) : assert.fail("set AG_BIN to the ag binary (scripts/test-mcp-ts does)");

const dir = mkdtempSync(join(tmpdir(), "ag-mcp-ts-"));
const adminToken = "agt_ts_admin_" + randomBytes(16).toString("hex");
let server; // { url, proc, stderr() }
let alice; // { token, dir, client, seen: string[] }
let bobToken;

/** env is this process's environment without AG_ variables (a developer's AG_TOKEN must not
 * leak into the processes under test), with extra. */
function env(extra) {
  const out = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("AG_")) out[k] = v;
  return { ...out, ...extra };
}

/** ag runs the ag command line with token and answers its stdout. */
async function ag(token, ...args) {
  try {
    const { stdout } = await run(bin, [...args, "--server", server.url], { env: env({ AG_TOKEN: token }) });
    return stdout;
  } catch (err) {
    throw new Error(`ag ${args.join(" ")}: ${err.message}\n${err.stdout ?? ""}${err.stderr ?? ""}`);
  }
}

function freePort() {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

async function startServer() {
  const addr = `127.0.0.1:${await freePort()}`;
  const data = join(dir, "server");
  mkdirSync(data);
  const proc = spawn(bin, ["serve", "--addr", addr, "--db", `sqlite:${join(data, "ag.db")}`], {
    env: env({ AG_BOOTSTRAP_TOKEN: adminToken }),
    cwd: data,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  proc.stderr.on("data", (b) => (stderr += b.toString()));
  const url = `http://${addr}`;
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline && proc.exitCode === null) {
    try {
      const res = await fetch(`${url}/readyz`);
      await res.arrayBuffer();
      if (res.status === 200) return { url, proc, stderr: () => stderr };
    } catch {
      // not listening yet
    }
    await delay(50);
  }
  proc.kill("SIGKILL");
  throw new Error(`ag serve did not become ready:\n${stderr}`);
}

/** principal creates an agent principal and answers its token. */
async function principal(name) {
  const out = JSON.parse(await ag(adminToken, "principal", "create", name, "--role", "agent", "--json"));
  assert.ok(out.token, `principal create ${name} answered no token`);
  return out.token;
}

/** call calls a tool, recording every text it answered. */
async function call(agent, name, args = {}) {
  const res = await agent.client.callTool({ name, arguments: args });
  agent.seen.push(JSON.stringify(res));
  return res;
}

/** ok calls a tool that must succeed and answers its structured result. */
async function ok(agent, name, args) {
  const res = await call(agent, name, args);
  assert.ok(!res.isError, `${name}: tool error: ${res.content?.map((c) => c.text).join("\n")}`);
  assert.ok(res.structuredContent, `${name}: no structured content`);
  return res.structuredContent;
}

before(async () => {
  server = await startServer();
  const src = join(dir, "src");
  mkdirSync(src);
  writeFileSync(join(src, "hello.txt"), "hello\n");
  writeFileSync(join(src, "other.txt"), "other\n");
  await ag(adminToken, "repo", "import", "app", src);

  const token = await principal("alice");
  bobToken = await principal("bob");
  const checkout = join(dir, "alice");
  await ag(token, "checkout", "app", checkout, "--holder", "ts");

  const transport = new StdioClientTransport({
    command: bin,
    args: ["mcp"],
    cwd: checkout,
    env: { AG_TOKEN: token, AG_SERVER: server.url },
    stderr: "pipe",
  });
  const client = new Client({ name: "ag-mcp-ts-test", version: "1.0.0" });
  await client.connect(transport);
  alice = { token, dir: checkout, client, seen: [] };
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
  await ag(bobToken, "checkout", "app", bobDir, "--holder", "cli");
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
