// The harness of the console's browser tests: a real `ag serve` (built from this tree by
// scripts/test-console, which passes AG_BIN and AG_WORKER_BIN) over a fresh SQLite store, the ag
// command line as the agents and the admin use it, ag-worker processes that validate, and a
// headless Chromium (CHROMIUM) driven by playwright-core. It serves the console the server
// embeds: internal/console/dist as committed, never a fresh build.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

function required(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run the console tests with scripts/test-console, which builds ag and ag-worker and sets it`);
  }
  return v;
}

// How long any wait for something the page or a process should do may take.
export const waitMs = 15_000;

// Every process started here, so that none outlives the tests, whatever fails.
const live = new Set();
process.on("exit", () => {
  for (const p of live) p.child.kill("SIGKILL");
});

// The environment of the processes under test: the runner's, without its AG_ variables (a
// developer's AG_TOKEN must not leak in), with extra.
function cleanEnv(extra) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith("AG_")) env[k] = v;
  }
  return { ...env, ...extra };
}

// Proc is a started process with its output so far.
class Proc {
  constructor(name, bin, args, { cwd, env }) {
    this.name = name;
    this.stdout = "";
    this.stderr = "";
    this.child = spawn(bin, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    this.child.stdout.setEncoding("utf8").on("data", (d) => (this.stdout += d));
    this.child.stderr.setEncoding("utf8").on("data", (d) => (this.stderr += d));
    this.exited = new Promise((resolve) => {
      this.child.on("error", (err) => {
        this.stderr += `\n(${name} did not start: ${err.message})\n`;
        live.delete(this);
        resolve({ code: -1, signal: null });
      });
      this.child.on("exit", async (code, signal) => {
        live.delete(this);
        // The process may exit before its output is all read: a command's answer must be whole
        // when it is read. Its streams end soon after, unless a process it started holds them.
        const ended = (s) => new Promise((r) => (s.closed || s.readableEnded ? r() : s.once("close", r)));
        await within(Promise.all([ended(this.child.stdout), ended(this.child.stderr)]), 1_000);
        resolve({ code, signal });
      });
    });
    this.done = false;
    void this.exited.then((st) => {
      this.done = true;
      this.status = st;
    });
    live.add(this);
  }

  // waitOutput waits until the process's stdout or stderr (stream) matches re, and answers the
  // match.
  async waitOutput(stream, re, ms = waitMs) {
    const deadline = Date.now() + ms;
    for (;;) {
      const m = this[stream].match(re);
      if (m) return m;
      if (this.done) {
        throw new Error(`${this.name} exited (${JSON.stringify(this.status)}) before its ${stream} matched ${re}\nstdout:\n${this.stdout}\nstderr:\n${this.stderr}`);
      }
      if (Date.now() > deadline) {
        throw new Error(`${this.name}: its ${stream} did not match ${re} within ${ms}ms\nstdout:\n${this.stdout}\nstderr:\n${this.stderr}`);
      }
      await sleep(50);
    }
  }

  // wait waits for the process to exit and answers {code, stdout, stderr}.
  async wait(ms = waitMs) {
    const st = await within(this.exited, ms);
    if (!st) {
      throw new Error(`${this.name} did not exit within ${ms}ms\nstdout:\n${this.stdout}\nstderr:\n${this.stderr}`);
    }
    return { code: st.code, stdout: this.stdout, stderr: this.stderr };
  }

  // stop ends the process: SIGTERM, then SIGKILL after grace.
  async stop(grace = 5_000) {
    if (this.done) return;
    this.child.kill("SIGTERM");
    const st = await within(this.exited, grace);
    if (!st) {
      this.child.kill("SIGKILL");
      await this.exited;
    }
  }
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// within answers what promise resolves to, or null when it takes longer than ms. It leaves no
// timer behind, which would keep the test process alive.
async function within(promise, ms) {
  let timer;
  const late = new Promise((r) => (timer = setTimeout(() => r(null), ms)));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Env is one ag server with what the tests start around it.
export class Env {
  // start starts a server and, unless browser is false, a headless Chromium.
  static async start({ browser = true } = {}) {
    const env = new Env();
    try {
      await env.#startServer();
      if (browser) {
        env.browser = await chromium.launch({
          executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
          headless: true,
          args: ["--no-sandbox"],
        });
      }
    } catch (err) {
      await env.stop();
      throw err;
    }
    return env;
  }

  constructor() {
    this.agBin = required("AG_BIN");
    this.workerBin = required("AG_WORKER_BIN");
    this.dir = mkdtempSync(join(tmpdir(), "ag-console-test-"));
    this.adminToken = "console-admin-" + randomBytes(16).toString("hex");
    this.procs = [];
    this.contexts = [];
    this.seq = 0;
  }

  // tmp answers a new directory under the environment's own.
  tmp(name) {
    const d = join(this.dir, `${name}-${++this.seq}`);
    mkdirSync(d, { recursive: true });
    return d;
  }

  start(name, bin, args, { cwd, env } = {}) {
    const p = new Proc(name, bin, args, { cwd: cwd ?? this.dir, env: env ?? cleanEnv({}) });
    this.procs.push(p);
    return p;
  }

  // auditKeyFile is the audit log's verifier key that ag serve wrote beside its SQLite database
  // (audit.key.pub, next to the default --audit-key).
  get auditKeyFile() {
    return join(this.serverDir, "audit.key.pub");
  }

  async #startServer() {
    this.serverDir = this.tmp("server");
    const db = "sqlite:" + join(this.serverDir, "ag.db");
    // The port is free when picked, but another process may take it first: then ag serve
    // exits saying so, and another one is tried.
    for (let attempt = 1; ; attempt++) {
      const addr = `127.0.0.1:${await freePort()}`;
      const p = this.start("ag serve", this.agBin, ["serve", "--addr", addr, "--db", db, "--poll-interval", "100ms"], {
        env: cleanEnv({ AG_BOOTSTRAP_TOKEN: this.adminToken }),
      });
      this.url = "http://" + addr;
      const deadline = Date.now() + waitMs;
      let last = "no answer yet";
      for (;;) {
        if (p.done) break;
        try {
          const res = await fetch(this.url + "/healthz", { signal: AbortSignal.timeout(1000) });
          if (res.ok) {
            this.server = p;
            return;
          }
          last = `${res.status} ${await res.text()}`;
        } catch (err) {
          last = String(err);
        }
        if (Date.now() > deadline) {
          await p.stop();
          throw new Error(`ag serve did not answer /healthz within ${waitMs}ms; last: ${last}\nits stderr:\n${p.stderr}`);
        }
        await sleep(50);
      }
      if (/address already in use/.test(p.stderr) && attempt < 3) continue;
      throw new Error(`ag serve exited at start (${JSON.stringify(p.status)}); its stderr:\n${p.stderr}`);
    }
  }

  // ag runs the ag command line with token (default: the admin's) against the server, in cwd
  // (default: a directory of its own), and answers {code, stdout, stderr}.
  async ag(args, { token = this.adminToken, cwd } = {}) {
    const p = this.agStart(args, { token, cwd });
    return p.wait(30_000);
  }

  // agStart starts the ag command line like ag, without waiting for it.
  agStart(args, { token = this.adminToken, cwd } = {}) {
    return this.start("ag " + args.join(" "), this.agBin, args, {
      cwd: cwd ?? this.dir,
      env: cleanEnv({ AG_SERVER: this.url, AG_TOKEN: token }),
    });
  }

  // must runs ag like ag and fails unless it exits 0; with --json among args, it answers the
  // parsed output, else the output.
  async must(args, opts) {
    const r = await this.ag(args, opts);
    if (r.code !== 0) {
      throw new Error(`ag ${args.join(" ")}: exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
    }
    return args.includes("--json") ? JSON.parse(r.stdout) : r.stdout;
  }

  // principal creates a principal of role (reader, agent, admin or worker) and answers
  // {name, token}.
  async principal(name, role) {
    const out = await this.must(["--json", "principal", "create", name, "--role", role]);
    if (!out.token) throw new Error(`ag principal create printed no token: ${JSON.stringify(out)}`);
    return { name, token: out.token };
  }

  // repo creates a repository; with command (an array), under that validation policy.
  async repo(name, command) {
    await this.must(["repo", "create", name]);
    if (command) await this.must(["repo", "set-validation", name, "--", ...command]);
    return name;
  }

  // agent creates an agent principal and checks repository out for it into a directory named
  // like it, and answers {name, token, dir, holder, ag(args), must(args)} that run ag there.
  async agent(name, repository) {
    const { token } = await this.principal(name, "agent");
    const dir = join(this.tmp("agent"), name);
    await this.must(["checkout", repository, dir], { token });
    return {
      name,
      token,
      dir,
      holder: `${name}|${name}`,
      ag: (args) => this.ag(args, { token, cwd: dir }),
      agStart: (args) => this.agStart(args, { token, cwd: dir }),
      must: (args) => this.must(args, { token, cwd: dir }),
      write: (path, content) => writeFileSync(join(dir, path), content),
    };
  }

  // worker starts an ag-worker of a new worker principal that runs validate jobs in the
  // bubblewrap sandbox (or the job kinds named, comma-separated), and waits until it has
  // started claiming. Stop it with stop().
  async worker(label, { kinds = "validate", principal = "ci-" + label } = {}) {
    const { token } = await this.principal(principal, "worker");
    const dir = this.tmp("worker-" + label);
    const p = this.start("ag-worker " + label, this.workerBin, [
      "--server", this.url, "--token", token, "--label", label,
      "--key", join(dir, label + ".key"), "--kinds", kinds, "--work-dir", this.tmp("work-" + label),
      "--cache-dir", join(dir, "cache"), "--lease", "2s", "--wait", "10s",
    ], { cwd: dir });
    await p.waitOutput("stderr", /msg="ag-worker started"/);
    return p;
  }

  // call posts body as JSON to the AGWP method method ("TaskService/CreateTask") with token
  // (default: the admin's), as a Connect client does, and answers the parsed answer; a refusal
  // fails with the server's status and answer.
  async call(method, body, token = this.adminToken) {
    const res = await fetch(`${this.url}/agwp.v1.${method}`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + token },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(waitMs),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${JSON.stringify(body)}: ${res.status} ${text}`);
    return JSON.parse(text);
  }

  // integrateFile makes a change through the API as holder (<principal>|label) of token: it
  // leases path, writes content there on the mainline, and integrates with extra fields of
  // IntegrateRequest (a task claim), and answers the change once it is final. A repository
  // without a validation policy integrates it at once.
  async integrateFile(token, { repository, label, path, content, message, ...extra }) {
    const { lease } = await this.call("LeaseService/AcquireLease", { repository, paths: [path], holder: label, ttl: "60s" }, token);
    const { repository: repo } = await this.call("RepositoryService/GetRepository", { name: repository }, token);
    const { change } = await this.call("RepositoryService/Integrate", {
      repository, baseRevision: repo.mainline, holder: label, message, fencingTokens: [lease.fencingToken],
      edits: [{ path, content: Buffer.from(content).toString("base64") }], ...extra,
    }, token);
    const deadline = Date.now() + waitMs;
    for (;;) {
      const { change: now } = await this.call("RepositoryService/GetChange", { changeId: change.id }, token);
      if (!["CHANGE_STATE_QUEUED", "CHANGE_STATE_VALIDATING"].includes(now.state)) return now;
      if (Date.now() > deadline) throw new Error(`change ${change.id} is still ${now.state} after ${waitMs}ms`);
      await sleep(100);
    }
  }

  // page opens path in a new tab: of context (a browser window, whose tabs share cookies and
  // localStorage, each with its own sessionStorage) when given, else of a new one.
  async page(path = "/", context) {
    if (!context) {
      context = await this.browser.newContext();
      this.contexts.push(context);
    }
    const page = await context.newPage();
    page.setDefaultTimeout(waitMs);
    page.errors = [];
    page.on("pageerror", (err) => page.errors.push(String(err)));
    await page.goto(this.url + path);
    return page;
  }

  // signedIn opens path in a new tab (of context when given, as page does) and signs in with
  // token through the form, as a person would, waiting until the console shows who is signed in.
  async signedIn(path, token, context) {
    const page = await this.page(path, context);
    await page.getByTestId("token").fill(token);
    await page.getByTestId("sign-in").click();
    await page.getByTestId("who").waitFor();
    return page;
  }

  async stop() {
    for (const c of this.contexts) await c.close().catch(() => {});
    if (this.browser) await this.browser.close().catch(() => {});
    // Workers and commands first, the server last: a worker stopping hands its jobs back.
    for (const p of [...this.procs].reverse()) await p.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// until waits until fn(arg), evaluated in the page, answers a truthy value, and answers it. On
// timeout it fails saying what it waited for and what the page showed then.
export async function until(page, what, fn, arg, ms = waitMs) {
  try {
    const handle = await page.waitForFunction(fn, arg, { timeout: ms, polling: "raf" });
    return await handle.jsonValue();
  } catch (err) {
    const shown = await page.evaluate(() => document.body.innerText).catch((e) => `(unreadable: ${e})`);
    throw new Error(`waiting for ${what}: ${err.message.split("\n")[0]}\nthe page (${page.url()}) showed:\n${shown}`);
  }
}

// texts answers the text of every element of data-testid id, in the page.
export function texts(page, id) {
  return page.$$eval(`[data-testid="${id}"]`, (els) => els.map((e) => e.textContent ?? ""));
}
