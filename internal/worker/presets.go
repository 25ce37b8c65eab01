package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/repo"
)

// workerPreset is what the worker does for one preset (docs/validation.md, "Presets"): which
// files of a tree decide what its prepare phase puts in the caches, what that phase runs and
// may write, and how the command sees what it wrote.
type workerPreset interface {
	// key answers a digest of the files of seen that decide what the prepare phase leaves in
	// the caches: while it stays the same, a run needs no prepare phase before it.
	key(seen repo.Tree) string
	// prepareSetup answers the caches the prepare phase for key writes, as the sandbox shows
	// them, and sets the phase's variables in vars (the policy's, and the proxy's).
	prepareSetup(c repoCaches, key string, vars map[string]string, p client.ValidatePayload) ([]boxMount, error)
	// script answers what the prepare phase r runs, by the sandbox's shell.
	script(r prepareRun) string
	// describe answers what the prepare phase runs, for the job's progress.
	describe() string
	// commandSetup shows the caches to the command of box, read-only, and answers the
	// command's environment; prepared tells whether the caches hold what the prepare phase
	// for key leaves.
	commandSetup(c repoCaches, key string, seen repo.Tree, box *boxDirs, env []string, prepared bool) ([]string, error)
	// warmsAfter reports whether the prepare phase runs again after each run, on its tree
	// (warmLater): Go compiles the packages, which change with every candidate; what the
	// others prepare follows from the key alone.
	warmsAfter() bool
}

var workerPresets = map[string]workerPreset{
	client.PresetGo:     goPreset{},
	client.PresetNode:   nodePreset{},
	client.PresetPython: pythonPreset{},
}

// goPreset: `go test -c`, which downloads the modules and compiles and vets every package and
// its tests into the repository's Go build cache, executing none of them.
type goPreset struct{}

func (goPreset) key(seen repo.Tree) string { return modulesDigest(seen) }
func (goPreset) describe() string          { return goPrepareScript }
func (goPreset) warmsAfter() bool          { return true }

// script answers what the prepare phase r runs: the Go preset's prepare, then the tools when
// r asks, with the prepare's exit status.
func (goPreset) script(r prepareRun) string {
	if !r.tools {
		return goPrepareScript
	}
	return goPrepareScript + "; s=$?; (" + goToolsScript + "); exit $s"
}

func (goPreset) prepareSetup(c repoCaches, _ string, vars map[string]string, p client.ValidatePayload) ([]boxMount, error) {
	vars["GOCACHE"], vars["GOMODCACHE"], vars["GOTOOLCHAIN"] = sandboxGoBuild, sandboxGoMod, "local"
	if _, ok := p.Env["GOPROXY"]; !ok {
		// The module proxy only, never "direct": a module it does not serve is not fetched
		// by running git against whatever host the candidate's go.mod names.
		vars["GOPROXY"] = "https://proxy.golang.org"
	}
	vars["GOFLAGS"] = strings.TrimSpace(p.Env["GOFLAGS"] + " -mod=readonly")
	return []boxMount{{Host: c.goBuild, Inner: sandboxGoBuild}, {Host: c.goMod, Inner: sandboxGoMod}}, nil
}

func (goPreset) commandSetup(c repoCaches, _ string, _ repo.Tree, box *boxDirs, env []string, _ bool) ([]string, error) {
	return c.commandSetup(box, env), nil
}

// Where the Node and Python presets' caches appear in the sandbox.
const (
	sandboxNPMCache   = sandboxCaches + "/npm"    // npm's download cache, in the prepare phase only
	sandboxNodePrefix = sandboxCaches + "/node"   // the prepared manifests and node_modules
	sandboxPipCache   = sandboxCaches + "/pip"    // pip's download cache, in the prepare phase only
	sandboxPython     = sandboxCaches + "/python" // the installed wheels, the command's PYTHONPATH
)

// keptPrepared is how many prepared directories (one per key) a repository keeps of the Node
// or Python preset: the ones used last; one used in the last preparedInUse is never removed.
const (
	keptPrepared  = 4
	preparedInUse = 24 * time.Hour
)

// keyDigest answers the digest of the entries of seen that keep says decide a preset's caches,
// named by the preset so that no two presets share one.
func keyDigest(preset string, seen repo.Tree, keep func(p string) bool) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", preset)
	for _, e := range seen {
		if keep(e.Path) {
			fmt.Fprintf(h, "%s %s %s\n", e.Path, e.GitMode(), e.Digest)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// keyed answers the host directory of key's prepared files of a preset (under name), created.
func (c repoCaches) keyed(name, key string) (string, error) {
	dir := filepath.Join(c.dir, name, key)
	return dir, os.MkdirAll(dir, 0o755)
}

// evict removes the prepared directories of a preset (under name) beyond the keptPrepared
// used last, but for key's and those used in the last preparedInUse. A directory's last use
// is its mark's time, which commandSetup renews.
func (c repoCaches) evict(name, key string, now time.Time) error {
	entries, err := os.ReadDir(filepath.Join(c.dir, name))
	if err != nil {
		return err
	}
	type use struct {
		key  string
		last time.Time
	}
	var uses []use
	for _, e := range entries {
		// Its mark's time, or, never marked, its own: a directory a prepare phase is filling
		// now (or one that failed) was made or written lately.
		var last time.Time
		if fi, err := e.Info(); err == nil {
			last = fi.ModTime()
		}
		if fi, err := os.Stat(filepath.Join(c.dir, "modules", e.Name())); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
		uses = append(uses, use{e.Name(), last})
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].last.After(uses[j].last) })
	var errs []error
	for i, u := range uses {
		if i < keptPrepared || u.key == key || now.Sub(u.last) < preparedInUse {
			continue
		}
		// The mark first: a directory without one is prepared again before a run uses it.
		if err := os.Remove(filepath.Join(c.dir, "modules", u.key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(c.dir, name, u.key)))
	}
	return errors.Join(errs...)
}

// touch renews the mark of key: the prepared directory is in use.
func (c repoCaches) touch(key string, now time.Time) error {
	return os.Chtimes(filepath.Join(c.dir, "modules", key), now, now)
}

// nodePreset: `npm ci --ignore-scripts` of the tree's manifests, copied into a directory of the
// worker's for their key, with npm's download cache beside it. The command sees the node_modules
// it made read-only where its package.json is, in its checkout.
type nodePreset struct{}

// nodeManifest reports whether p is a file the Node preset's prepare phase reads.
func nodeManifest(p string) bool {
	switch path.Base(p) {
	case "package.json", "package-lock.json", "npm-shrinkwrap.json":
	default:
		return false
	}
	return !slices.Contains(strings.Split(p, "/"), "node_modules")
}

func (nodePreset) key(seen repo.Tree) string { return keyDigest(client.PresetNode, seen, nodeManifest) }
func (nodePreset) describe() string {
	return "npm ci --ignore-scripts (package-lock.json)"
}
func (nodePreset) warmsAfter() bool { return false }

// nodePrepareScript copies the manifests (regular files only, not those under a node_modules:
// what nodeManifest keeps) into the prepared directory and installs the packages there. npm
// runs no script: not the packages' install scripts, not the project's own (prepare, install).
// The tree's .npmrc is not copied: npm's configuration is the worker's (the run's home is empty)
// and the policy's variables, never a repository's settings. The writable directories that
// tools keep under node_modules (.cache, .vite) are made so that each run gets its own there.
const nodePrepareScript = `set -e
cd ` + sandboxTree + `
find . -name node_modules -prune -o -type f \( -name package.json -o -name package-lock.json -o -name npm-shrinkwrap.json \) ` +
	`-exec sh -c 'for f; do mkdir -p "$0/${f%/*}" && cp "$f" "$0/$f"; done' ` + sandboxNodePrefix + ` {} +
cd ` + sandboxNodePrefix + `
npm ci --ignore-scripts --no-audit --no-fund --no-update-notifier
mkdir -p node_modules/.cache node_modules/.vite`

func (nodePreset) script(prepareRun) string { return nodePrepareScript }

func (nodePreset) prepareSetup(c repoCaches, key string, vars map[string]string, _ client.ValidatePayload) ([]boxMount, error) {
	dir, err := c.keyed("node", key)
	if err != nil {
		return nil, err
	}
	npm := filepath.Join(c.dir, "npm")
	if err := os.MkdirAll(npm, 0o755); err != nil {
		return nil, err
	}
	vars["npm_config_cache"] = sandboxNPMCache
	return []boxMount{{Host: npm, Inner: sandboxNPMCache}, {Host: dir, Inner: sandboxNodePrefix}}, nil
}

// commandSetup shows each node_modules the prepare phase made at its place in the checkout,
// read-only, unless the tree has something there itself, with directories of the run's own
// over the .cache and .vite in the top one.
func (nodePreset) commandSetup(c repoCaches, key string, seen repo.Tree, box *boxDirs, env []string, prepared bool) ([]string, error) {
	env = append(env, "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false", "npm_config_offline=true")
	if !prepared {
		return env, nil
	}
	now := time.Now()
	if err := c.touch(key, now); err != nil {
		return nil, err
	}
	if err := c.evict("node", key, now); err != nil {
		return nil, err
	}
	dir := filepath.Join(c.dir, "node", key)
	taken := map[string]bool{} // directories of the tree that hold a node_modules of their own
	packages := map[string]bool{}
	for _, e := range seen {
		if i := strings.Index("/"+e.Path+"/", "/node_modules/"); i >= 0 {
			taken[strings.TrimSuffix(("/" + e.Path)[:i], "/")] = true
		}
		if path.Base(e.Path) == "package.json" && nodeManifest(e.Path) {
			d := "" // the checkout's root
			if dir := path.Dir(e.Path); dir != "." {
				d = "/" + dir
			}
			packages[d] = true
		}
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, d := range slices.Sorted(maps.Keys(packages)) { // a directory before those below it
		if taken[d] {
			continue
		}
		// A node_modules npm made, and no link on the way to it: bwrap would follow one on
		// the worker's side, wherever it led.
		host := filepath.Join(dir, filepath.FromSlash(d), "node_modules")
		if real, err := filepath.EvalSymlinks(host); err != nil || real != filepath.Join(realDir, filepath.FromSlash(d), "node_modules") {
			continue
		}
		if fi, err := os.Lstat(host); err != nil || !fi.IsDir() {
			continue
		}
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		box.Mounts = append(box.Mounts, boxMount{
			Host: filepath.Join(dir, filepath.FromSlash(d), "node_modules"), Inner: sandboxTree + d + "/node_modules", ReadOnly: true,
		})
	}
	if len(dirs) > 0 && dirs[0] == "" {
		for _, own := range []string{".cache", ".vite"} {
			host := filepath.Join(box.Home, "..", "node_modules"+own)
			if err := os.Mkdir(host, 0o700); err != nil {
				return nil, err
			}
			box.Mounts = append(box.Mounts, boxMount{Host: host, Inner: sandboxTree + "/node_modules/" + own})
		}
	}
	return env, nil
}

// pythonPreset: the wheels the tree's requirements files name, installed by pip into a
// directory of the worker's for their key, with pip's download cache beside it; the command
// has that directory on its PYTHONPATH, read-only.
type pythonPreset struct{}

// pythonRequirements reports whether p is a requirements file the Python preset reads: a .txt
// whose name holds "requirements", or any .txt in a directory named requirements.
func pythonRequirements(p string) bool {
	if !strings.HasSuffix(p, ".txt") {
		return false
	}
	return strings.Contains(path.Base(p), "requirements") || slices.Contains(strings.Split(path.Dir(p), "/"), "requirements")
}

func (pythonPreset) key(seen repo.Tree) string {
	return keyDigest(client.PresetPython, seen, pythonRequirements)
}
func (pythonPreset) describe() string { return "pip install --only-binary=:all: (requirements files)" }
func (pythonPreset) warmsAfter() bool { return false }

// pythonSanitize is run by the sandbox's python3 in the prepare phase: it reads the tree's
// requirements files at its root (and those they include with -r or -c, when pythonRequirements
// keeps them) as data and writes the requirements pip installs, keeping only lines that name a
// package from the index: a name, its extras, versions, markers and hashes. Whatever would make
// pip build or run code of the repository (-e, a path, a URL, `name @ url`) or take packages
// from elsewhere than the worker's registries (--index-url, --find-links, ...) is left out,
// and said on stderr, which the worker logs.
const pythonSanitize = `
import os, re, sys
tree, out = sys.argv[1], sys.argv[2]
name = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?")
spec = re.compile(r"\s*((===?|~=|!=|<=?|>=?)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*$")
hashopt = re.compile(r"--hash[=\s]+[a-z0-9]+:[0-9a-fA-F]+$")
def keep(rel):
    return rel.endswith(".txt") and ("requirements" in os.path.basename(rel) or "requirements" in os.path.dirname(rel).split("/"))
reqs, cons, seen, constraining = [], [], set(), set()
def read(rel, into, depth):
    if rel in seen or depth > 8:
        return
    seen.add(rel)
    full = os.path.join(tree, rel)
    if os.path.islink(full) or not os.path.isfile(full):
        print("ag: %s: not a file of the tree, left out" % rel, file=sys.stderr)
        return
    with open(full, encoding="utf-8", errors="replace") as f:
        text = f.read().replace("\\\n", " ")
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        m = re.match(r"(-r|--requirement|-c|--constraint)[=\s]+(\S+)$", line)
        if m:
            inc = os.path.normpath(os.path.join(os.path.dirname(rel), m.group(2)))
            if inc.startswith("..") or os.path.isabs(inc) or not keep(inc):
                print("ag: %s: %s is not a requirements file of the tree, left out" % (rel, m.group(2)), file=sys.stderr)
            else:
                if m.group(1) in ("-c", "--constraint"):
                    constraining.add(inc)
                read(inc, into if m.group(1) in ("-r", "--requirement") else cons, depth + 1)
            continue
        parts = re.split(r"\s+(?=--)", line)
        req, opts = parts[0], parts[1:]
        body, _, marker = req.partition(";")
        n = name.match(body)
        if line.startswith("-") or not n or not spec.match(body[n.end():]) or not all(hashopt.match(o) for o in opts):
            print("ag: %s: left out: %s" % (rel, line[:200]), file=sys.stderr)
            continue
        into.append(" ".join([req] + opts))
roots = [rel for rel in sorted(os.listdir(tree)) if keep(rel)]
if os.path.isdir(os.path.join(tree, "requirements")) and not os.path.islink(os.path.join(tree, "requirements")):
    roots += ["requirements/" + rel for rel in sorted(os.listdir(os.path.join(tree, "requirements"))) if keep("requirements/" + rel)]
# A file that another one names with -c is read as constraints only.
err, sys.stderr = sys.stderr, open(os.devnull, "w")
for rel in roots:
    read(rel, [], 0)
sys.stderr, seen, cons = err, set(), []
for rel in roots:
    if rel not in constraining:
        read(rel, reqs, 0)
with open(os.path.join(out, "requirements.txt"), "w") as f:
    f.write("".join(l + "\n" for l in reqs))
with open(os.path.join(out, "constraints.txt"), "w") as f:
    f.write("".join(l + "\n" for l in cons))
`

// pythonPrepareScript installs the sanitized requirements as binary wheels only: no sdist is
// built, so no package's setup code runs, and a wheel's installation runs nothing. A fresh
// directory each time: pip does not replace what a failed try left. Python runs isolated (-I)
// and outside the checkout: run there, it would import the checkout's re.py or json.py in
// place of the standard library's, the repository's code with the caches writable.
var pythonPrepareScript = `set -e
rm -rf ` + sandboxPython + `/site
mkdir -p ` + sandboxPython + `/site
cd ` + sandboxPython + `
python3 -I -c '` + strings.ReplaceAll(pythonSanitize, "'", `'"'"'`) + `' ` + sandboxTree + ` ` + sandboxPython + `
if [ -s ` + sandboxPython + `/requirements.txt ]; then
python3 -I -m pip install --disable-pip-version-check --no-input --no-warn-script-location --only-binary=:all: ` +
	`--target ` + sandboxPython + `/site --cache-dir ` + sandboxPipCache + ` --retries 2 ` +
	`-c ` + sandboxPython + `/constraints.txt -r ` + sandboxPython + `/requirements.txt
fi`

func (pythonPreset) script(prepareRun) string { return pythonPrepareScript }

func (pythonPreset) prepareSetup(c repoCaches, key string, vars map[string]string, _ client.ValidatePayload) ([]boxMount, error) {
	dir, err := c.keyed("python", key)
	if err != nil {
		return nil, err
	}
	pip := filepath.Join(c.dir, "pip")
	if err := os.MkdirAll(pip, 0o755); err != nil {
		return nil, err
	}
	// pip's configuration is the policy's variables: no file of the repository's is read.
	vars["PIP_CONFIG_FILE"] = "/dev/null"
	return []boxMount{{Host: pip, Inner: sandboxPipCache}, {Host: dir, Inner: sandboxPython}}, nil
}

func (pythonPreset) commandSetup(c repoCaches, key string, _ repo.Tree, box *boxDirs, env []string, prepared bool) ([]string, error) {
	if !prepared {
		return env, nil
	}
	now := time.Now()
	if err := c.touch(key, now); err != nil {
		return nil, err
	}
	if err := c.evict("python", key, now); err != nil {
		return nil, err
	}
	site := sandboxPython + "/site"
	box.Mounts = append(box.Mounts, boxMount{Host: filepath.Join(c.dir, "python", key, "site"), Inner: site, ReadOnly: true})
	// The wheels' programs (pytest, ...) first on PATH, and their packages on PYTHONPATH,
	// after the policy's own directories there (a project's src/, say).
	pythonPath := site
	for i, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + site + "/bin:" + p
		}
		if p, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok && p != "" {
			pythonPath = p + ":" + site
		}
	}
	return append(env, "PYTHONPATH="+pythonPath), nil
}
