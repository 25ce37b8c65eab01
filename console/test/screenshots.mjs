// The screenshots of docs/console.md: a real ag serve (the harness's), a scene seeded the way
// agents and an admin make one with the command line (a repository validated in two lanes and
// on the whole tree, agents holding leases, changes integrated, one rejected, some validating
// on real ag-workers, jobs of other kinds), then the console's pages as a reader sees them,
// saved as 1280x800 PNGs (a repository's and a change's pages whole, taller). Run it with
// scripts/console-screenshots, which builds ag and ag-worker and passes AG_BIN, AG_WORKER_BIN and
// CHROMIUM; the argument is the directory the PNGs go to. It is not a test (not *.test.mjs): it
// fails only when the scene cannot be made or a page does not show it.
import { mkdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Env, until } from "./harness.mjs";

const out = resolve(process.argv[2] ?? "docs/console");
mkdirSync(out, { recursive: true });

// The repository's checks: a lane for the storefront (web/), one for the API (api/), and the
// whole tree's, which runs both and then end-to-end suites slow enough to be seen running.
const files = {
  "README.md": "# shop\n\nThe storefront (web/) and its API (api/). `sh check.sh` runs every check.\n",
  "check.sh": `#!/bin/sh
# The whole tree: each lane's checks, then the end-to-end suites.
set -e
sh web/check.sh
sh api/check.sh
for suite in browse cart checkout orders payments refunds; do
  echo "e2e $suite: running"
  sleep 8
  echo "e2e $suite: ok"
done
`,
  "web/check.sh": `#!/bin/sh
# The web lane: no TODO may ship in the storefront's scripts.
status=0
for f in web/*.js; do
  if grep -Hn TODO "$f"; then
    echo "FAIL $f: a TODO would ship"
    status=1
  else
    echo "ok   $f"
  fi
done
exit $status
`,
  "api/check.sh": `#!/bin/sh
# The api lane: every handler is of package api and has its test.
status=0
for f in api/*.go; do
  case "$f" in *_test.go) continue ;; esac
  if ! head -n 1 "$f" | grep -q '^package api$'; then
    echo "FAIL $f: not package api"; status=1
  elif [ ! -f "\${f%.go}_test.go" ]; then
    echo "FAIL $f: no \${f%.go}_test.go"; status=1
  else
    echo "ok   $f"
  fi
done
exit $status
`,
  "web/index.html": '<!doctype html>\n<title>shop</title>\n<script src="cart.js"></script>\n',
  "web/cart.js": "export function total(items) {\n  return items.reduce((sum, i) => sum + i.price * i.quantity, 0);\n}\n",
  "api/orders.go": "package api\n\n// Order is one customer's order.\ntype Order struct {\n\tID       string\n\tQuantity int\n}\n",
  "api/orders_test.go": "package api\n",
};

const env = await Env.start();
try {
  const { ops, rejected } = await scene();
  await shots(ops, rejected);
} finally {
  await env.stop();
}

async function scene() {
  const repo = await env.repo("shop");
  const ops = await env.principal("ops", "reader");

  // alice lays the repository out, before it has a policy: her change integrates at once.
  const alice = await env.agent("alice", repo);
  await alice.must(["lease", "acquire", "README.md", "check.sh", "web/", "api/"]);
  mkdirSync(join(alice.dir, "web"), { recursive: true });
  mkdirSync(join(alice.dir, "api"), { recursive: true });
  for (const [path, content] of Object.entries(files)) alice.write(path, content);
  await alice.must(["integrate", "-m", "shop: the storefront and its API, with their checks"]);
  await alice.must(["lease", "release"]);
  await env.must([
    "repo", "set-validation", repo,
    "--lane", "web=web/:sh web/check.sh",
    "--lane", "api=api/:sh api/check.sh",
    "--", "sh", "check.sh",
  ]);

  await env.worker("linux-1");
  await env.worker("linux-2");
  await env.worker("batch-1", { kinds: "ag.noop", principal: "batch" });

  const [bob, carol, dave, erin, frank, gina, hank, ivy] = await Promise.all(
    ["bob", "carol", "dave", "erin", "frank", "gina", "hank", "ivy"].map((name) => env.agent(name, repo)),
  );

  // Two changes, one in each lane, validated at once and integrated.
  await Promise.all([
    (async () => {
      await bob.must(["lease", "acquire", "--ttl", "45m", "web/cart.js"]);
      bob.write("web/cart.js", readFileSync(join(bob.dir, "web/cart.js"), "utf8") +
        "\nexport function withTax(total, rate) {\n  return Math.round(total * (1 + rate) * 100) / 100;\n}\n");
      await bob.must(["integrate", "-m", "cart: show the total with tax"]);
    })(),
    (async () => {
      await carol.must(["lease", "acquire", "--ttl", "30m", "api/orders.go"]);
      carol.write("api/orders.go", files["api/orders.go"] +
        "\n// Valid refuses an order of nothing.\nfunc (o Order) Valid() bool { return o.Quantity > 0 }\n");
      await carol.must(["integrate", "-m", "orders: refuse a quantity of zero"]);
    })(),
  ]);

  // One the web lane rejects: it would ship a TODO.
  await dave.must(["lease", "acquire", "--ttl", "40m", "web/checkout.js"]);
  dave.write("web/checkout.js",
    "import { total } from \"./cart.js\";\n\nexport function pay(items, code) {\n  // TODO: apply the discount code\n  return total(items);\n}\n");
  const r = await dave.ag(["--json", "integrate", "-m", "checkout: pay, with discount codes"]);
  if (r.code !== 5) throw new Error(`dave's change was not rejected: exit ${r.code}\n${r.stdout}\n${r.stderr}`);
  const rejected = JSON.parse(r.stdout).change?.id ?? JSON.parse(r.stdout).id;
  if (!rejected) throw new Error(`no change id in ${r.stdout}`);

  // Work in progress: leases held, nothing sent yet.
  await frank.must(["lease", "acquire", "--ttl", "20m", "web/styles/"]);
  await gina.must(["lease", "acquire", "--ttl", "12m", "api/auth.go"]);

  // Changes across both lanes, validated on the whole tree: two at once on the two workers,
  // the third waiting.
  await erin.must(["lease", "acquire", "--ttl", "25m", "web/search.js", "api/search.go", "api/search_test.go"]);
  erin.write("web/search.js", "export async function search(q) {\n  return (await fetch(\"/api/search?q=\" + encodeURIComponent(q))).json();\n}\n");
  erin.write("api/search.go", "package api\n\n// Search answers the products whose name holds q.\nfunc Search(q string) []string { return nil }\n");
  erin.write("api/search_test.go", "package api\n");
  await erin.must(["integrate", "--no-wait", "-m", "search: an endpoint and a search box"]);
  await hank.must(["lease", "acquire", "--ttl", "15m", "README.md"]);
  hank.write("README.md", files["README.md"] + "\nEach lane's check runs alone: `sh web/check.sh`, `sh api/check.sh`.\n");
  await hank.must(["integrate", "--no-wait", "-m", "readme: how to run one lane's checks"]);
  await ivy.must(["lease", "acquire", "--ttl", "35m", "Makefile"]);
  ivy.write("Makefile", "check:\n\tsh check.sh\n");
  await ivy.must(["integrate", "--no-wait", "-m", "make check"]);

  // Jobs of other kinds: some done by the batch worker, some waiting, one cancelled.
  for (let i = 0; i < 6; i++) await env.must(["job", "enqueue", "ag.noop", "--payload", `{"ms": ${150 + 50 * i}}`]);
  await env.must(["job", "enqueue", "report.nightly", "--delay", "8h"]);
  await env.must(["job", "enqueue", "index.rebuild", "--priority", "5"]);
  const late = await env.must(["--json", "job", "enqueue", "ag.noop", "--delay", "1h"]);
  await env.must(["job", "cancel", late.job?.id ?? late.id]);
  return { ops, rejected };
}

async function shots(ops, rejected) {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
  env.contexts.push(context);
  // shot saves the page as name.png: the viewport, or with fullPage the whole page.
  const shot = async (page, name, { fullPage = false } = {}) => {
    await page.mouse.move(0, 0);
    await page.screenshot({ path: join(out, name + ".png"), type: "png", fullPage });
    console.log(join(out, name + ".png"));
  };

  const signin = await env.page("/", context);
  await signin.getByTestId("token").waitFor();
  await shot(signin, "sign-in");

  const page = await env.signedIn("/#/repo/shop", ops.token, context);
  const go = (hash) => page.evaluate((h) => (window.location.hash = h), hash);
  await until(page, "the leases, two candidates validating on the workers, one change waiting and the changes", () => {
    const running = [...document.querySelectorAll('[data-testid="candidate-row"]')].filter((r) => /linux-\d/.test(r.textContent));
    return (
      document.querySelectorAll('[data-testid="lease-row"]').length >= 7 &&
      running.length === 2 &&
      running.every((r) => /e2e \w+: running/.test(r.textContent)) &&
      document.querySelectorAll('[data-testid="waiting-row"]').length === 1 &&
      document.querySelectorAll('[data-testid="change-row"]').length >= 7
    );
  }, undefined, 60_000);
  await shot(page, "repository", { fullPage: true });

  await go("#/change/" + rejected);
  await until(page, "the rejected change with its output", () =>
    document.querySelector('[data-testid="change-state"]')?.textContent === "rejected" &&
    /FAIL web\/checkout\.js/.test(document.querySelector('[data-testid="change-reason"]')?.textContent ?? "") &&
    /FAIL/.test(document.querySelector('[data-testid="job-output"]')?.textContent ?? ""),
  );
  await page.getByTestId("show-diff").click();
  await until(page, "the change's diff", () => /TODO: apply the discount code/.test(document.querySelector('[data-testid="diff-file"]')?.textContent ?? ""));
  await shot(page, "change", { fullPage: true });

  await go("#/jobs");
  await until(page, "the job counts and the jobs", () =>
    Number(document.querySelector('[data-testid="count-completed"] .value')?.textContent) >= 9 &&
    document.querySelectorAll('[data-testid="job-row"]').length >= 12,
  );
  await shot(page, "jobs");

  await go("#/workers");
  await until(page, "the three workers with their keys", () => {
    const rows = [...document.querySelectorAll('[data-testid="worker-row"]')];
    return rows.length >= 3 && rows.every((r) => !/none registered/.test(r.textContent));
  });
  await shot(page, "workers");

  await go("#/audit");
  await page.getByTestId("audit-key").fill(readFileSync(env.auditKeyFile, "utf8").trim());
  await page.getByTestId("verify-server").click();
  await until(page, "the log verified", () => /: verified\./.test(document.querySelector('[data-testid="verify-result"]')?.textContent ?? ""));
  await shot(page, "audit");

  for (const p of [signin, page]) {
    if (p.errors.length > 0) throw new Error(`the page threw: ${p.errors.join("\n")}`);
  }
}
