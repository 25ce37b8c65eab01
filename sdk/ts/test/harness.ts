// Starts a real `ag serve` process for the tests: the binary from $AG_BIN, or built from this
// repository with `go build ./cmd/ag`, on a free loopback port over a fresh SQLite store, with an
// admin token the test chose. Stopped (SIGTERM, then SIGKILL) by stop().
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { setTimeout as delay } from "node:timers/promises";

export interface AgServer {
  url: string;
  adminToken: string;
  /** What the process wrote to stderr so far. */
  stderr(): string;
  stop(): Promise<void>;
}

let builtBin: string | undefined;

/** repoRoot answers the directory of go.mod above this file. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "go.mod"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("go.mod not found above " + fileURLToPath(import.meta.url));
    dir = up;
  }
  return dir;
}

/** agBin answers the ag binary to run: $AG_BIN, or one built once per test process. */
export function agBin(): string {
  if (process.env.AG_BIN) return resolve(process.env.AG_BIN);
  if (!builtBin) {
    const dir = mkdtempSync(join(tmpdir(), "ag-ts-bin-"));
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
    builtBin = join(dir, "ag");
    execFileSync("go", ["build", "-o", builtBin, "./cmd/ag"], { cwd: repoRoot(), stdio: ["ignore", "inherit", "inherit"] });
  }
  return builtBin;
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === "object" && addr ? res(addr.port) : rej(new Error("no port"))));
    });
  });
}

/** cleanEnv is this process's environment without AG_ variables, so a developer's AG_TOKEN or
 * AG_SERVER cannot reach the server under test. */
export function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("AG_")) env[k] = v;
  return { ...env, ...extra };
}

/** startServer starts `ag serve` and waits until GET /readyz answers 200. */
export async function startServer(extraArgs: string[] = []): Promise<AgServer> {
  const bin = agBin();
  const adminToken = "ts-admin-" + randomBytes(16).toString("hex");
  for (let attempt = 1; ; attempt++) {
    const dir = mkdtempSync(join(tmpdir(), "ag-ts-"));
    const addr = `127.0.0.1:${await freePort()}`;
    const proc = spawn(bin, ["serve", "--addr", addr, "--db", `sqlite:${join(dir, "ag.db")}`, "--poll-interval", "100ms", ...extraArgs], {
      env: cleanEnv({ AG_BOOTSTRAP_TOKEN: adminToken }),
      cwd: dir, // the server's default files (its audit key) go with its database
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    proc.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
    const exited = new Promise<void>((res) => proc.once("exit", () => res()));
    const server: AgServer = {
      url: `http://${addr}`,
      adminToken,
      stderr: () => stderr,
      stop: async () => {
        await stopProcess(proc, exited);
        rmSync(dir, { recursive: true, force: true });
      },
    };
    if (await waitReady(server.url, proc)) return server;
    await server.stop();
    // The port was free when picked but another process may have taken it: try another.
    if (stderr.includes("address already in use") && attempt < 3) continue;
    throw new Error(`ag serve did not become ready; its stderr:\n${stderr}`);
  }
}

async function waitReady(url: string, proc: ChildProcess): Promise<boolean> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline && proc.exitCode === null && proc.signalCode === null) {
    try {
      const res = await fetch(`${url}/readyz`);
      await res.arrayBuffer();
      if (res.status === 200) return true;
    } catch {
      // not listening yet
    }
    await delay(50);
  }
  return false;
}

/** stopProcess sends SIGTERM, and SIGKILL when the process has not exited 10 s later. */
export async function stopProcess(proc: ChildProcess, exited: Promise<void>): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  proc.kill("SIGTERM");
  const killer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(killer);
}

/** eventually polls cond every 50 ms until it holds, failing after ms. */
export async function eventually(what: string, cond: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await delay(50);
  }
}
