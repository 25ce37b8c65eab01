package worker

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/repo"
)

// TestPythonRequirementsKeepOnlyPackagesOfTheIndex: what the Python preset's prepare phase
// gives pip of the tree's requirements files. A package by name, with extras, versions, markers
// and hashes, is kept; whatever would make pip build or run the repository's code (-e, a
// path, a URL, `name @ url`), take packages from elsewhere (--index-url, --find-links) or read a
// file outside the tree's requirements is left out, and said.
func TestPythonRequirementsKeepOnlyPackagesOfTheIndex(t *testing.T) {
	t.Parallel()
	tree, out := t.TempDir(), t.TempDir()
	files := map[string]string{
		"requirements.txt": "# pinned\nrequests[socks]==2.31.0 ; python_version >= \"3.8\" \\\n" +
			"    --hash=sha256:58cd2187c01e70e6e26505bca751777aa9f2ee0b7f4300988b709f44e013003f\n" +
			"idna>=3.4,<4\n-e .\n./vendor/x\nx @ https://example.com/x.tar.gz\nhttps://example.com/y.whl\n" +
			"--index-url http://evil.example/simple\n--extra-index-url=http://evil.example/simple\n-f /tmp\n" +
			"-r requirements/dev.txt\n-r ../outside.txt\n-r notes.txt\n-c constraints-requirements.txt\n" +
			"ok==1 --install-option=--prefix=/ag/cache\nsix\n",
		"requirements/dev.txt":           "pytest==8.0.0\n-r ../requirements.txt\n",
		"constraints-requirements.txt":   "urllib3<3\n",
		"notes.txt":                      "evil==1\n",
		"docs/requirements.txt":          "sphinx\n", // not at the root: not read
		"requirements/link-requirements": "",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(tree, "linked-requirements.txt")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-c", pythonSanitize, tree, out)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the sanitizer: %v\n%s", err, stderr.String())
	}
	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	wantReqs := []string{
		`requests[socks]==2.31.0 ; python_version >= "3.8" --hash=sha256:58cd2187c01e70e6e26505bca751777aa9f2ee0b7f4300988b709f44e013003f`,
		"idna>=3.4,<4", "pytest==8.0.0", "six",
	}
	if got := read("requirements.txt"); !slices.Equal(got, wantReqs) {
		t.Errorf("requirements pip installs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantReqs, "\n"))
	}
	if got := read("constraints.txt"); !slices.Equal(got, []string{"urllib3<3"}) {
		t.Errorf("constraints: %q, want urllib3<3", got)
	}
	for _, said := range []string{"-e .", "./vendor/x", "x @ https://example.com/x.tar.gz", "https://example.com/y.whl",
		"--index-url", "--extra-index-url", "-f /tmp", "../outside.txt is not a requirements file", "notes.txt is not a requirements file",
		"--install-option", "linked-requirements.txt: not a file of the tree"} {
		if !strings.Contains(stderr.String(), said) {
			t.Errorf("the sanitizer said\n%s\nwant it to say what it left out: %q", stderr.String(), said)
		}
	}
}

// testCaches answers a repository's prepared caches in a worker's cache directory of its own.
func testCaches(t *testing.T) repoCaches {
	t.Helper()
	c, err := (&Validator{CacheDir: t.TempDir()}).preparedCaches("app")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// nodeCommandSetup runs the Node preset's setup of a command over the tree seen, whose
// prepared directory prepare fills first (as a prepare phase would), and answers that
// directory, the run's directory, its box with the mounts made and the command's environment.
func nodeCommandSetup(t *testing.T, seen repo.Tree, prepare func(dir string)) (string, string, boxDirs, []string) {
	t.Helper()
	c := testCaches(t)
	key := nodePreset{}.key(seen)
	dir, err := c.keyed("node", key)
	if err != nil {
		t.Fatal(err)
	}
	prepare(dir)
	if err := c.markModules(key); err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	box, err := makeBoxDirs(run, filepath.Join(run, "tree"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := nodePreset{}.commandSetup(c, key, seen, &box, []string{"PATH=/usr/bin"}, true)
	if err != nil {
		t.Fatal(err)
	}
	return dir, run, box, env
}

// TestNodeModulesAreShownWhereTheirPackageIs: the Node preset shows each node_modules the
// prepare phase made at its package's place in the checkout, read-only, but where the tree
// has a node_modules of its own or a link stands on the way to it; the top one gets directories of the run's own over its .cache
// and .vite.
func TestNodeModulesAreShownWhereTheirPackageIs(t *testing.T) {
	t.Parallel()
	seen := repo.Tree{
		{Path: "package.json"}, {Path: "package-lock.json"},
		{Path: "packages/a/package.json"}, {Path: "packages/b/package.json"}, {Path: "packages/b/node_modules/x/index.js"},
		{Path: ".github/package.json"}, {Path: "vendor/node_modules/y/package.json"},
		{Path: "packages/c/package.json"}, // its directory a link out of the prepared one
	}
	dir, run, box, env := nodeCommandSetup(t, seen, func(dir string) {
		for _, d := range []string{"node_modules/.cache", "node_modules/.vite", "packages/a/node_modules", "packages/b/node_modules", "vendor/node_modules/y/node_modules"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		elsewhere := t.TempDir()
		if err := os.Mkdir(filepath.Join(elsewhere, "node_modules"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, filepath.Join(dir, "packages", "c")); err != nil {
			t.Fatal(err)
		}
	})
	var got []string
	for _, m := range box.Mounts {
		host, _ := filepath.Rel(dir, m.Host)
		if !strings.HasPrefix(m.Host, dir) {
			host, _ = filepath.Rel(run, m.Host)
			host = "run:" + host
		}
		got = append(got, host+" -> "+m.Inner+map[bool]string{true: " ro", false: " rw"}[m.ReadOnly])
	}
	want := []string{
		"node_modules -> /ag/tree/node_modules ro",
		"packages/a/node_modules -> /ag/tree/packages/a/node_modules ro",
		"run:node_modules.cache -> /ag/tree/node_modules/.cache rw",
		"run:node_modules.vite -> /ag/tree/node_modules/.vite rw",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Contains(env, "npm_config_offline=true") {
		t.Errorf("the command's environment %q: want npm offline (it has no network)", env)
	}
}

// TestNodeModulesAreShownOnlyWhereTheTreeHasNone: the Node preset shows no prepared
// node_modules where the tree holds one of its own (at its root too, and then none of the
// run's own caches under it), nor one that is not a directory npm made (a file, a link out);
// and every other package's, whatever the order the packages are met in.
func TestNodeModulesAreShownOnlyWhereTheTreeHasNone(t *testing.T) {
	t.Parallel()
	mounts := func(t *testing.T, seen repo.Tree, prepared func(dir string)) []string {
		t.Helper()
		_, _, box, _ := nodeCommandSetup(t, seen, prepared)
		var got []string
		for _, m := range box.Mounts {
			got = append(got, m.Inner)
		}
		return got
	}
	mkdirs := func(t *testing.T, dir string, dirs ...string) {
		t.Helper()
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}

	root := repo.Tree{{Path: "package.json"}, {Path: "node_modules/z/index.js"}}
	if got := mounts(t, root, func(dir string) { mkdirs(t, dir, "node_modules/z") }); len(got) != 0 {
		t.Errorf("a tree with a node_modules of its own at its root: mounts %q, want none", got)
	}

	var seen repo.Tree
	var want []string
	for i := range 8 {
		seen = append(seen, repo.Entry{Path: fmt.Sprintf("p%d/package.json", i)})
		want = append(want, fmt.Sprintf("/ag/tree/p%d/node_modules", i))
	}
	seen = append(seen, repo.Tree{
		{Path: "own/package.json"}, {Path: "own/node_modules/x/index.js"},
		{Path: "a-file/package.json"}, {Path: "a-out/package.json"}, // met first: the others are still shown
	}...)
	got := mounts(t, seen, func(dir string) {
		for i := range 8 {
			mkdirs(t, dir, fmt.Sprintf("p%d/node_modules", i))
		}
		mkdirs(t, dir, "own/node_modules", "a-file")
		if err := os.WriteFile(filepath.Join(dir, "a-file", "node_modules"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		elsewhere := t.TempDir()
		mkdirs(t, elsewhere, "node_modules")
		if err := os.Symlink(elsewhere, filepath.Join(dir, "a-out")); err != nil {
			t.Fatal(err)
		}
	})
	if !slices.Equal(got, want) {
		t.Errorf("mounts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPreparedDirectoriesAreEvictedWhenUnused: of a preset's prepared directories, the
// keptPrepared used last stay, and any used in the last preparedInUse, a directory a prepare
// phase is filling among them; the others go, their marks first.
func TestPreparedDirectoriesAreEvictedWhenUnused(t *testing.T) {
	t.Parallel()
	c := testCaches(t)
	now := time.Now()
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6"}
	for i, k := range keys {
		if _, err := c.keyed("node", k); err != nil {
			t.Fatal(err)
		}
		if err := c.markModules(k); err != nil {
			t.Fatal(err)
		}
		// k0 used now, k1 an hour ago, ..., k6 six days ago; k5 was used a minute ago.
		last := now.Add(-time.Duration(i) * 25 * time.Hour)
		if k == "k5" {
			last = now.Add(-time.Minute)
		}
		if err := os.Chtimes(filepath.Join(c.dir, "modules", k), last, last); err != nil {
			t.Fatal(err)
		}
	}
	// Each directory as old as its mark, but k7: never marked, made now, as by a prepare
	// phase under way beside this run.
	for i, k := range keys {
		last := now.Add(-time.Duration(i) * 25 * time.Hour)
		if k == "k5" {
			last = now.Add(-time.Minute)
		}
		if err := os.Chtimes(filepath.Join(c.dir, "node", k), last, last); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.keyed("node", "k7"); err != nil {
		t.Fatal(err)
	}
	if err := c.evict("node", "k6", now); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, k := range append(keys, "k7") {
		_, dirErr := os.Stat(filepath.Join(c.dir, "node", k))
		if dirErr == nil {
			left = append(left, k)
		}
		if k != "k7" && (dirErr == nil) != c.hasModules(k) {
			t.Errorf("%s: directory there %v, mark there %v; want both or neither", k, dirErr == nil, c.hasModules(k))
		}
	}
	// k7 being prepared, k5 and k0 used last, then k1; k6 is the key in use; k2, k3 and k4 go.
	if want := []string{"k0", "k1", "k5", "k6", "k7"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

// TestEachPresetsPrepareWritesOnlyItsOwnCaches: what each preset's prepare phase may write
// (its caches, as the sandbox shows them) and the variables it runs with: Go from the module
// proxy unless the policy names one, never "direct", and its modules read-only to the build;
// npm and pip with their download caches beside the key's directory, pip reading no
// configuration file of the repository's.
func TestEachPresetsPrepareWritesOnlyItsOwnCaches(t *testing.T) {
	t.Parallel()
	c := testCaches(t)
	describe := func(mounts []boxMount) []string {
		var got []string
		for _, m := range mounts {
			host, err := filepath.Rel(c.dir, m.Host)
			if err != nil || strings.HasPrefix(host, "..") {
				host = m.Host
			}
			if fi, err := os.Stat(m.Host); err != nil || !fi.IsDir() {
				t.Errorf("%s, shown at %s: not a directory made for the phase (%v)", m.Host, m.Inner, err)
			}
			got = append(got, host+" -> "+m.Inner+map[bool]string{true: " ro", false: " rw"}[m.ReadOnly])
		}
		return got
	}
	for _, tc := range []struct {
		preset     string
		env        map[string]string
		wantMounts []string
		wantVars   map[string]string
	}{
		{
			preset:     "go",
			wantMounts: []string{"go-build -> /ag/cache/go-build rw", "go-mod -> /ag/cache/go-mod rw"},
			wantVars: map[string]string{"GOCACHE": "/ag/cache/go-build", "GOMODCACHE": "/ag/cache/go-mod", "GOTOOLCHAIN": "local",
				"GOPROXY": "https://proxy.golang.org", "GOFLAGS": "-mod=readonly"},
		},
		{
			preset:     "go",
			env:        map[string]string{"GOPROXY": "https://goproxy.example", "GOFLAGS": "-tags=integration"},
			wantMounts: []string{"go-build -> /ag/cache/go-build rw", "go-mod -> /ag/cache/go-mod rw"},
			// The policy's GOPROXY reaches the phase with the policy's other variables.
			wantVars: map[string]string{"GOCACHE": "/ag/cache/go-build", "GOMODCACHE": "/ag/cache/go-mod", "GOTOOLCHAIN": "local",
				"GOFLAGS": "-tags=integration -mod=readonly"},
		},
		{
			preset:     "node",
			wantMounts: []string{"npm -> /ag/cache/npm rw", "node/k1 -> /ag/cache/node rw"},
			wantVars:   map[string]string{"npm_config_cache": "/ag/cache/npm"},
		},
		{
			preset:     "python",
			wantMounts: []string{"pip -> /ag/cache/pip rw", "python/k1 -> /ag/cache/python rw"},
			wantVars:   map[string]string{"PIP_CONFIG_FILE": "/dev/null"},
		},
	} {
		vars := map[string]string{}
		mounts, err := workerPresets[tc.preset].prepareSetup(c, "k1", vars, client.ValidatePayload{Env: tc.env})
		if err != nil {
			t.Fatalf("%s: %v", tc.preset, err)
		}
		if got := describe(mounts); !slices.Equal(got, tc.wantMounts) {
			t.Errorf("%s with %v: the phase writes\n%s\nwant\n%s", tc.preset, tc.env, strings.Join(got, "\n"), strings.Join(tc.wantMounts, "\n"))
		}
		if !maps.Equal(vars, tc.wantVars) {
			t.Errorf("%s with %v: variables %v, want %v", tc.preset, tc.env, vars, tc.wantVars)
		}
	}
}

// TestThePythonPresetShowsItsWheelsReadOnlyAfterThePolicysPaths: a command of the Python
// preset sees the wheels its prepare phase installed read-only, their programs first on PATH
// and their packages on PYTHONPATH after the policy's own directories; unprepared, it sees
// nothing of them. Its key's directory is marked used now, and so kept from eviction.
func TestThePythonPresetShowsItsWheelsReadOnlyAfterThePolicysPaths(t *testing.T) {
	t.Parallel()
	c := testCaches(t)
	if _, err := c.keyed("python", "k1"); err != nil {
		t.Fatal(err)
	}
	if err := c.markModules("k1"); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(filepath.Join(c.dir, "modules", "k1"), long, long); err != nil {
		t.Fatal(err)
	}
	setup := func(env []string, prepared bool) (boxDirs, []string) {
		t.Helper()
		run := t.TempDir()
		box, err := makeBoxDirs(run, filepath.Join(run, "tree"))
		if err != nil {
			t.Fatal(err)
		}
		env, err = pythonPreset{}.commandSetup(c, "k1", nil, &box, env, prepared)
		if err != nil {
			t.Fatal(err)
		}
		return box, env
	}

	box, env := setup([]string{"PATH=/usr/bin", "PYTHONPATH=/ag/tree/src"}, false)
	if len(box.Mounts) != 0 || !slices.Equal(env, []string{"PATH=/usr/bin", "PYTHONPATH=/ag/tree/src"}) {
		t.Errorf("unprepared: mounts %v, environment %q; want none and the policy's", box.Mounts, env)
	}
	if fi, err := os.Stat(filepath.Join(c.dir, "modules", "k1")); err != nil || !fi.ModTime().Equal(long) {
		t.Errorf("unprepared: the key's mark was touched (%v)", err)
	}

	box, env = setup([]string{"HOME=/ag/home", "PATH=/usr/bin", "PYTHONPATH=/ag/tree/src"}, true)
	want := []boxMount{{Host: filepath.Join(c.dir, "python", "k1", "site"), Inner: "/ag/cache/python/site", ReadOnly: true}}
	if !slices.Equal(box.Mounts, want) {
		t.Errorf("mounts %v, want %v", box.Mounts, want)
	}
	if wantEnv := []string{"HOME=/ag/home", "PATH=/ag/cache/python/site/bin:/usr/bin", "PYTHONPATH=/ag/tree/src",
		"PYTHONPATH=/ag/tree/src:/ag/cache/python/site"}; !slices.Equal(env, wantEnv) {
		t.Errorf("environment %q, want %q (the last PYTHONPATH is the one the command gets)", env, wantEnv)
	}
	if fi, err := os.Stat(filepath.Join(c.dir, "modules", "k1")); err != nil || time.Since(fi.ModTime()) > time.Hour {
		t.Errorf("the key's mark is not renewed by its use (%v)", err)
	}

	// A policy without a PYTHONPATH, or with an empty one, gets the wheels' alone.
	for _, policy := range [][]string{{"PATH=/bin"}, {"PATH=/bin", "PYTHONPATH="}} {
		_, env = setup(slices.Clone(policy), true)
		if len(env) == 0 || env[len(env)-1] != "PYTHONPATH=/ag/cache/python/site" {
			t.Errorf("policy %q: the command's environment %q, want the wheels' PYTHONPATH alone last", policy, env)
		}
	}
}

// TestPythonRequirementsAreTheFilesThePrepareReads: the Python preset's key is a digest of the
// files its sanitizer reads, a .txt named for requirements or in a requirements directory, and
// of no other: editing a README does not prepare the wheels again.
func TestPythonRequirementsAreTheFilesThePrepareReads(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"requirements.txt": true, "dev-requirements.txt": true, "requirements/dev.txt": true,
		"tools/requirements/lint.txt": true, "docs/requirements.txt": true,
		"requirements.in": false, "requirements/README.md": false, "notes.txt": false, "requirementsdir/x.txt": false,
	} {
		if got := pythonRequirements(p); got != want {
			t.Errorf("pythonRequirements(%q) = %v, want %v", p, got, want)
		}
	}
	seen := repo.Tree{{Path: "requirements.txt", Digest: "a"}, {Path: "README.md", Digest: "b"}}
	edited := repo.Tree{{Path: "requirements.txt", Digest: "a"}, {Path: "README.md", Digest: "c"}}
	key := pythonPreset{}.key
	if key(seen) != key(edited) {
		t.Error("editing README.md changed the Python preset's key")
	}
	if bumped := (repo.Tree{{Path: "requirements.txt", Digest: "z"}, {Path: "README.md", Digest: "b"}}); key(seen) == key(bumped) {
		t.Error("editing requirements.txt left the Python preset's key as it was")
	}
}

// TestAnEvictionGoesOnPastAMarkItCannotRemove: a prepared directory used a whole
// preparedInUse ago is no longer in use and goes; one whose mark cannot be removed stays, said
// in the error, with its mark, and those after it still go.
func TestAnEvictionGoesOnPastAMarkItCannotRemove(t *testing.T) {
	t.Parallel()
	c := testCaches(t)
	now := time.Now().Truncate(time.Second) // whole seconds: any file system keeps them exactly
	used := map[string]time.Time{"b": now.Add(-preparedInUse), "c": now.Add(-preparedInUse - time.Hour), "d": now.Add(-preparedInUse - 2*time.Hour)}
	for i := range keptPrepared {
		used[fmt.Sprintf("a%d", i)] = now.Add(-time.Duration(i) * time.Minute)
	}
	for k, last := range used {
		if _, err := c.keyed("node", k); err != nil {
			t.Fatal(err)
		}
		if k == "c" { // a mark that is a directory with something in it: os.Remove fails
			if err := os.MkdirAll(filepath.Join(c.dir, "modules", k, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := c.markModules(k); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Join(c.dir, "node", k), filepath.Join(c.dir, "modules", k)} {
			if err := os.Chtimes(p, last, last); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := c.evict("node", "a0", now)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(c.dir, "modules", "c")) {
		t.Errorf("evict: %v, want the error of c's mark", err)
	}
	var left []string
	for _, k := range slices.Sorted(maps.Keys(used)) {
		if _, err := os.Stat(filepath.Join(c.dir, "node", k)); err == nil {
			left = append(left, k)
			if !c.hasModules(k) {
				t.Errorf("%s stays without its mark", k)
			}
		} else if c.hasModules(k) {
			t.Errorf("%s went, its mark stays", k)
		}
	}
	if want := []string{"a0", "a1", "a2", "a3", "c"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}
