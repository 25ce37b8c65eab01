//go:build unix

package e2e

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// The attacks on the Node and Python presets' caches (docs/validation.md, "Presets"). In each, the
// repository's own install scripts would poison the prepared packages if the prepare phase ran
// them, and an agent then lands a test that overwrites every file of the prepared packages it
// can reach with code that ends the process with success: had either worked, every later
// test run would pass. The next change, which breaks the code, must be rejected.

// nodeProject depends on is-number 7.0.0 from registry.npmjs.org, and its install scripts
// (which `npm ci --ignore-scripts` must not run) rewrite that package to pass every test.
var nodeProject = map[string]string{
	"package.json": `{
  "name": "calc",
  "version": "1.0.0",
  "private": true,
  "scripts": {
    "test": "node test.js",
    "preinstall": "mkdir -p node_modules/is-number && echo 'process.exit(0)' > node_modules/is-number/index.js",
    "postinstall": "echo 'process.exit(0)' > node_modules/is-number/index.js",
    "prepare": "echo 'process.exit(0)' > node_modules/is-number/index.js"
  },
  "dependencies": { "is-number": "7.0.0" }
}
`,
	"package-lock.json": `{
  "name": "calc",
  "version": "1.0.0",
  "lockfileVersion": 3,
  "requires": true,
  "packages": {
    "": { "name": "calc", "version": "1.0.0", "dependencies": { "is-number": "7.0.0" } },
    "node_modules/is-number": {
      "version": "7.0.0",
      "integrity": "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng==",
      "license": "MIT",
      "engines": { "node": ">=0.12.0" }
    }
  }
}
`,
	".npmrc":  "ignore-scripts=false\n",
	"calc.js": "module.exports.add = (a, b) => a + b;\n",
	// The checks, then whatever else the tree holds to run.
	"test.js": `const fs = require("fs");
const isNumber = require("is-number");
const { add } = require("./calc");
if (!isNumber(5) || isNumber("x")) { console.error("is-number is not is-number"); process.exit(1); }
const left = fs.readdirSync("node_modules/.cache");
if (left.length) { console.error("a run found another run's files in node_modules/.cache: " + left); process.exit(1); }
if (add(2, 3) !== 5) { console.error("2 + 3 is not 5"); process.exit(1); }
if (fs.existsSync("poison.js")) require("./poison.js");
console.log("ok");
`,
}

// nodePoison overwrites every file it reaches under node_modules and /ag/cache with code that
// passes any test, plants files beside them, and leaves a file in the run's own
// node_modules/.cache, where the next run looks.
const nodePoison = `const fs = require("fs"), path = require("path");
const marker = "TSET-A-YB-DENOSIOP".split("").reverse().join("");
function walk(dir) {
  let names;
  try { names = fs.readdirSync(dir); } catch (e) { return; }
  try { fs.writeFileSync(path.join(dir, "planted-" + marker), marker); } catch (e) { console.log("plant in " + dir + ": " + e.code); }
  for (const n of names) {
    const p = path.join(dir, n);
    const st = fs.lstatSync(p);
    if (st.isDirectory()) walk(p);
    else if (st.isFile()) {
      try { fs.writeFileSync(p, "/* " + marker + " */ process.exit(0);\n"); } catch (e) { console.log("overwrite " + p + ": " + e.code); }
    }
  }
}
walk(fs.realpathSync("node_modules"));
walk("/ag/cache");
fs.writeFileSync("node_modules/.cache/planted-" + marker, marker);
`

// TestANodePresetsCachesCannotBePoisoned: with `--preset node`, the worker's prepare phase
// installs the lockfile's packages with `npm ci --ignore-scripts` (the repository's install
// scripts, and its .npmrc asking for them, do nothing) and the command sees that node_modules
// read-only. A test that overwrites what it can of it leaves the worker's copy as npm wrote it,
// and the next broken change is rejected.
func TestANodePresetsCachesCannotBePoisoned(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, nodeProject, "--preset", "node", "--timeout", "5m", "--", "npm", "test")
		cache := t.TempDir()
		g.worker(t, "w1", 30*time.Second, "--cache-dir", cache, "--egress-allow", "registry.npmjs.org")
		mallory := g.agent(t, "mallory")

		edit(t, mallory, "poison.js", nodePoison)
		landEventually(t, g, mallory, "mallory: a test that poisons node_modules")
		prepared := filepath.Join(cache, "prepared")
		index := findFile(t, prepared, filepath.Join("node_modules", "is-number", "index.js"))
		if b, err := os.ReadFile(index); err != nil || !strings.Contains(string(b), "module.exports = function(num)") {
			t.Errorf("the prepared is-number/index.js is\n%s\n(%v); want is-number's own, as npm installed it", b, err)
		}
		checkNotPoisoned(t, prepared, 1)

		mallory.must(t, "sync")
		edit(t, mallory, "calc.js", "module.exports.add = (a, b) => a - b;\n")
		stdout, stderr, code := mallory.ag(t, "integrate", "-m", "mallory: break add")
		rejected(t, "mallory", stdout, stderr, code, "2 + 3 is not 5")
	})
}

// pythonProject names a wheel of the worker's wheelhouse, and asks pip for what would run the
// repository's own code in the prepare phase: the project itself (its setup.py rewrites the
// installed package to pass every test), a path, a URL, another index; and it holds a module
// named as one of the standard library's, which Python would import from the checkout were
// the prepare phase's python run there.
var pythonProject = map[string]string{
	"requirements.txt": "agdemo==1.0  # the wheelhouse's\n-e .\n./vendor/agdemo\n" +
		"agdemo @ file:///ag/tree/vendor/agdemo\nhttps://files.example/agdemo-1.0-py3-none-any.whl\n" +
		"--index-url http://index.example/simple\n-r ../../etc/passwd\n-r requirements-dev.txt\n",
	"requirements-dev.txt": "--find-links /ag/tree/vendor\n",
	"setup.py": "import glob\n" +
		"for f in glob.glob('/ag/cache/python/site/agdemo/*.py'):\n" +
		"    open(f, 'w').write('import os\\nos._exit(0)\\n')\n" +
		"from setuptools import setup\nsetup(name='calc', version='1.0')\n",
	"vendor/agdemo/setup.py": "open('/ag/cache/python/site/agdemo/__init__.py', 'w').write('import os\\nos._exit(0)\\n')\n",
	// A module of the standard library, which Python imports from the checkout when it runs
	// there: in the prepare phase it would plant a package that passes every test where pip
	// then installs (pip leaves what it finds in its --target), in the command it is the
	// standard library's.
	"re.py": "import os, sys\n" +
		"try:\n" +
		"    os.makedirs('/ag/cache/python/site/agdemo', exist_ok=True)\n" +
		"    open('/ag/cache/python/site/agdemo/__init__.py', 'w').write('import os\\nos._exit(0)\\n')\n" +
		"except OSError:\n" +
		"    pass\n" +
		"sys.path = [p for p in sys.path if p not in ('', '.', os.getcwd())]\n" +
		"del sys.modules[__name__]\n" +
		"import re as _real\n" +
		"sys.modules[__name__] = _real\n" +
		"globals().update(_real.__dict__)\n",
	"calc.py": "def add(a, b):\n    return a + b\n",
	"test_calc.py": `import os, unittest
import agdemo, calc

class TestCalc(unittest.TestCase):
    def test_agdemo(self):
        self.assertTrue(agdemo.is_number(5))
        self.assertFalse(agdemo.is_number("x"))

    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5, "2 + 3 is not 5")

if os.path.exists("poison.py"):
    import poison
`,
}

// pythonPoison overwrites every file it reaches under the wheels' directory with code that
// ends the process with success, and plants files beside them.
const pythonPoison = `import os, sys
marker = "TSET-A-YB-DENOSIOP"[::-1]
site = os.path.dirname(os.path.dirname(__import__("agdemo").__file__))
for root in (site, "/ag/cache"):
    for d, dirs, files in os.walk(root):
        try:
            open(os.path.join(d, "planted-" + marker), "w").write(marker)
        except OSError as e:
            print("plant in", d, e.strerror)
        for f in files:
            try:
                open(os.path.join(d, f), "w").write("# %s\nimport os\nos._exit(0)\n" % marker)
            except OSError as e:
                print("overwrite", f, e.strerror)
`

// TestAPythonPresetsCachesCannotBePoisoned: with `--preset python`, the worker's prepare phase
// installs the wheels the requirements name (from the operator's wheelhouse here, as from an
// index through the egress proxy), never the project nor a path, a URL or an index the
// repository names, and the command sees them read-only on its PYTHONPATH. A test that
// overwrites what it can of them leaves the worker's copy as pip wrote it, and the next broken
// change is rejected.
func TestAPythonPresetsCachesCannotBePoisoned(t *testing.T) {
	t.Parallel()
	wheels := t.TempDir()
	writeWheel(t, filepath.Join(wheels, "agdemo-1.0-py3-none-any.whl"), "agdemo", "1.0", map[string]string{
		"agdemo/__init__.py": "def is_number(x):\n    return isinstance(x, (int, float))\n",
	})
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, pythonProject, "--preset", "python", "--timeout", "5m",
			"--env", "PIP_NO_INDEX=1", "--env", "PIP_FIND_LINKS="+wheels, "--", "python3", "-m", "unittest", "-v")
		cache := t.TempDir()
		g.worker(t, "w1", 30*time.Second, "--cache-dir", cache, "--sandbox-ro", wheels)
		mallory := g.agent(t, "mallory")

		edit(t, mallory, "poison.py", pythonPoison)
		landEventually(t, g, mallory, "mallory: a test that poisons the wheels")
		prepared := filepath.Join(cache, "prepared")
		init := findFile(t, prepared, filepath.Join("site", "agdemo", "__init__.py"))
		if b, err := os.ReadFile(init); err != nil || !strings.Contains(string(b), "def is_number(x)") {
			t.Errorf("the prepared agdemo/__init__.py is\n%s\n(%v); want the wheel's own, as pip installed it", b, err)
		}
		checkNotPoisoned(t, prepared, 3)

		mallory.must(t, "sync")
		edit(t, mallory, "calc.py", "def add(a, b):\n    return a - b\n")
		stdout, stderr, code := mallory.ag(t, "integrate", "-m", "mallory: break add")
		rejected(t, "mallory", stdout, stderr, code, "2 + 3 is not 5")
	})
}

// landEventually integrates the agent's edits with --no-wait and waits until the change landed:
// the repository's first validation prepares the caches, longer than the harness waits for a
// command.
func landEventually(t *testing.T, g *gateEnv, a *agentShell, message string) {
	t.Helper()
	stdout, stderr, code := a.ag(t, "integrate", "--no-wait", "-m", message)
	m := regexp.MustCompile(`^change (\S+) `).FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("ag integrate --no-wait: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for deadline := time.Now().Add(4 * time.Minute); ; <-tick.C {
		c := g.change(t, m[1])
		if c.GetState() == agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
			return
		}
		if time.Now().After(deadline) || c.GetState() == agwpv1.ChangeState_CHANGE_STATE_REJECTED {
			t.Fatalf("%q is %s: %s; want it integrated (its test passes)", message, c.GetState(), c.GetReason())
		}
	}
}

// findFile answers the one file under root whose path ends in suffix.
func findFile(t *testing.T, root, suffix string) string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, string(filepath.Separator)+suffix) {
			found = append(found, path)
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("files under %s ending in %s: %v; want one", root, suffix, found)
	}
	return found[0]
}

// checkNotPoisoned fails t when a file under prepared holds the poisoning tests' marker, in its
// name or its content; at least atLeast files must be there.
func checkNotPoisoned(t *testing.T, prepared string, atLeast int) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(prepared, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.Contains(d.Name(), "POISONED") {
			t.Errorf("the test planted %s in the worker's prepared caches", path)
		}
		if d.Type().IsRegular() {
			files++
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), "POISONED-BY-A-TEST") {
				t.Errorf("the test overwrote %s in the worker's prepared caches", path)
			}
		}
		return nil
	})
	if err != nil || files < atLeast {
		t.Fatalf("the prepared caches under %s: %d files, %v; want the installed packages there", prepared, files, err)
	}
}

// writeWheel writes a wheel of the pure-Python distribution name==version holding files.
func writeWheel(t *testing.T, path, name, version string, files map[string]string) {
	t.Helper()
	info := name + "-" + version + ".dist-info/"
	all := map[string]string{
		info + "METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n",
		info + "WHEEL":    "Wheel-Version: 1.0\nGenerator: ag-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	for p, c := range files {
		all[p] = c
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := zip.NewWriter(f)
	var record strings.Builder
	for p, c := range all {
		fw, err := w.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(c))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", p, base64.RawURLEncoding.EncodeToString(sum[:]), len(c))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	fw, err := w.Create(info + "RECORD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.Write([]byte(record.String())); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
