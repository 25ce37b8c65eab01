// What the tests of this directory share: a real `ag serve` on a free port over a fresh SQLite
// store, the ag command line, and agents that reach ag only through `ag mcp` with the official
// TypeScript client (@modelcontextprotocol/sdk) over stdio, with its default options.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { setTimeout as delay } from "node:timers/promises";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

export const run = promisify(execFile);
export const bin = process.env.AG_BIN ? resolve(process.env.AG_BIN) : assert.fail("set AG_BIN to the ag binary (scripts/test-mcp-ts does)");

/** env is this process's environment without AG_ variables (a developer's AG_TOKEN must not
 * leak into the processes under test), with extra. */
export function env(extra) {
  const out = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("AG_")) out[k] = v;
  return { ...out, ...extra };
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

/** startServer starts `ag serve` with its data in dir/server and answers { url, proc, stderr(),
 * adminToken, ag(token, ...args) }: ag runs the command line against it and answers its stdout. */
export async function startServer(dir) {
  const adminToken = "agt_ts_admin_" + randomBytes(16).toString("hex");
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
  const ag = async (token, ...args) => {
    try {
      // Flags first: what follows a -- is a command of its own.
      const { stdout } = await run(bin, ["--server", url, ...args], { env: env({ AG_TOKEN: token }) });
      return stdout;
    } catch (err) {
      throw new Error(`ag ${args.join(" ")}: ${err.message}\n${err.stdout ?? ""}${err.stderr ?? ""}`);
    }
  };
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline && proc.exitCode === null) {
    try {
      const res = await fetch(`${url}/readyz`);
      await res.arrayBuffer();
      if (res.status === 200) return { url, proc, stderr: () => stderr, adminToken, ag };
    } catch {
      // not listening yet
    }
    await delay(50);
  }
  proc.kill("SIGKILL");
  throw new Error(`ag serve did not become ready:\n${stderr}`);
}

/** principal creates a principal of role (agent by default) and answers its token. */
export async function principal(server, name, role = "agent") {
  const out = JSON.parse(await server.ag(server.adminToken, "principal", "create", name, "--role", role, "--json"));
  assert.ok(out.token, `principal create ${name} answered no token`);
  return out.token;
}

/** connect starts `ag mcp` in the checkout dir with token, as an MCP host does, and answers the
 * agent: { token, dir, client, transport, seen }. */
export async function connect(server, token, dir, name = "ag-mcp-ts-test") {
  const transport = new StdioClientTransport({
    command: bin,
    args: ["mcp"],
    cwd: dir,
    env: { AG_TOKEN: token, AG_SERVER: server.url },
    stderr: "pipe",
  });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return { token, dir, client, transport, seen: [] };
}

/** call calls a tool, recording every text it answered. */
export async function call(agent, name, args = {}) {
  const res = await agent.client.callTool({ name, arguments: args });
  agent.seen.push(JSON.stringify(res));
  return res;
}

/** ok calls a tool that must succeed and answers its structured result. */
export async function ok(agent, name, args) {
  const res = await call(agent, name, args);
  assert.ok(!res.isError, `${name}: tool error: ${res.content?.map((c) => c.text).join("\n")}`);
  assert.ok(res.structuredContent, `${name}: no structured content`);
  return res.structuredContent;
}

/** text answers a tool result's text. */
export function text(res) {
  return (res.content ?? []).map((c) => c.text ?? "").join("\n");
}
