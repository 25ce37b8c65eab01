//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// TestAgentWorkflow is issue 3's "done when", typed as two agents would from two shells: an
// admin loads a repository, alice and bob check it out, lease files, integrate, get in each
// other's way (a lease conflict, an unleased edit, a stale token after expiry, a sync that would
// clobber a local edit), and in the end both see each other's work.
func TestAgentWorkflow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		s := startServer(t, backend)
		admin := func(args ...string) []string { return append(args, "--server", s.URL, "--token", s.AdminToken) }

		// The admin creates the repository and imports a folder into it.
		out := mustAG(t, admin("repo", "create", "app")...)
		if !regexp.MustCompile(`^created repository app \(mainline \S+\)\n$`).MatchString(out) {
			t.Fatalf("ag repo create app printed %q, want \"created repository app (mainline REV)\"", out)
		}
		files := map[string]string{
			"README.md":     "# app\n",
			"src/a.go":      "package src\n\nfunc A() int { return 1 }\n",
			"src/b.go":      "package src\n\nfunc B() int { return 2 }\n",
			"src/util/c.go": "package util\n\nfunc C() int { return 3 }\n",
			"docs/guide.md": "How to use app.\n",
		}
		importDir := t.TempDir()
		writeTree(t, importDir, files)
		out = mustAG(t, admin("repo", "import", "app", importDir)...)
		m := regexp.MustCompile(`^imported 5 files into app: change \S+, mainline (\S+)\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ag repo import printed %q, want \"imported 5 files into app: change ID, mainline REV\"", out)
		}
		imported := m[1]
		if out := mustAG(t, admin("repo", "list")...); !containsLine(out, "app", imported) {
			t.Errorf("ag repo list does not show app at %s:\n%s", imported, out)
		}

		// Two agents, each with a checkout of its own.
		root := t.TempDir()
		alice := &agentShell{s: s, holder: "alice|a1", dir: filepath.Join(root, "alice"), token: createAgent(t, s, "alice")}
		bob := &agentShell{s: s, holder: "bob|bob", dir: filepath.Join(root, "bob"), token: createAgent(t, s, "bob")}
		out = mustAG(t, "checkout", "app", alice.dir, "--holder", "a1", "--server", s.URL, "--token", alice.token)
		if !strings.HasPrefix(out, "checked out app at "+imported+" into "+alice.dir+" (5 files); you edit as a1") {
			t.Errorf("ag checkout (alice) printed %q", out)
		}
		out = mustAG(t, "checkout", "app", bob.dir, "--server", s.URL, "--token", bob.token)
		if !strings.Contains(out, "(5 files); you edit as bob") {
			t.Errorf("ag checkout (bob, default holder) printed %q; want the holder label taken from the directory's name", out)
		}
		assertTree(t, alice.dir, files)
		assertTree(t, bob.dir, files)
		// The checkout remembers its server: no --server needed inside it.
		if out, errOut, code := runAG(t, "status", "-C", bob.dir, "--token", bob.token); code != 0 ||
			!strings.Contains(out, "mainline "+imported+": up to date") || !strings.Contains(out, "no local edits") {
			t.Errorf("ag status without --server in a fresh checkout: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}

		// Alice leases src/a.go, edits it and integrates.
		la := parseLease(t, alice.must(t, "lease", "acquire", "src/a.go", "--json"))
		if la.Holder != alice.holder || strings.Join(la.Paths, " ") != "src/a.go" || la.State != "LEASE_STATE_ACTIVE" {
			t.Fatalf("alice's lease: %+v; want src/a.go, active, held by %s", la, alice.holder)
		}
		aliceA := files["src/a.go"] + "\n// A is one, says alice.\n"
		writeFile(t, alice.dir, "src/a.go", aliceA)
		if out := alice.must(t, "status"); !containsLine(out, "modified", "src/a.go") {
			t.Errorf("ag status (alice) does not list her edit of src/a.go:\n%s", out)
		}
		rev1 := alice.integrated(t, "alice: document A", 1)
		if got := s.mainline(t); got != rev1 {
			t.Fatalf("after alice's integrate the mainline is %s, want %s", got, rev1)
		}

		// Bob cannot lease alice's file: the refusal says whose it is and until when.
		out, errOut, code := bob.ag(t, "lease", "acquire", "src/a.go")
		until := la.ExpiresAt.UTC().Format(time.RFC3339)
		if code == 0 || !containsAll(errOut, "src/a.go", alice.holder, until) {
			t.Errorf("bob's ag lease acquire src/a.go: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a non-zero exit naming %s and the expiry %s",
				code, out, errOut, alice.holder, until)
		}
		// Who holds what.
		out = bob.must(t, "lease", "list")
		if h := strings.Fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(h, " ") != "PATHS HOLDER TOKEN STATE EXPIRES LEASE" {
			t.Errorf("ag lease list: header %q", h)
		}
		if !containsLine(out, "src/a.go", alice.holder, strconv.FormatUint(la.Token, 10), "active", "in ", la.ID) {
			t.Errorf("ag lease list does not show alice's active lease %s on src/a.go:\n%s", la.ID, out)
		}

		// Bob leases his own file and edits it, and edits alice's file without a lease: refused,
		// and nothing is integrated.
		// (-C a directory inside the checkout: paths are relative to it, as with git -C.)
		lb := parseLease(t, mustAG(t, "lease", "acquire", "b.go", "--json",
			"-C", filepath.Join(bob.dir, "src"), "--server", s.URL, "--token", bob.token))
		if lb.Holder != bob.holder || strings.Join(lb.Paths, " ") != "src/b.go" || lb.Token <= la.Token {
			t.Errorf("bob's lease on src/b.go: %+v; want src/b.go held by %s with a token above alice's %d", lb, bob.holder, la.Token)
		}
		bobB := files["src/b.go"] + "\n// B is two, says bob.\n"
		writeFile(t, bob.dir, "src/b.go", bobB)
		writeFile(t, bob.dir, "src/a.go", files["src/a.go"]+"\n// bob was here too.\n")
		out, errOut, code = bob.ag(t, "integrate", "-m", "bob: b.go, and a.go on the side")
		if code == 0 || !containsAll(errOut, "failed precondition", "src/a.go") {
			t.Errorf("bob's integrate with an unleased edit of src/a.go: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a failed precondition naming src/a.go",
				code, out, errOut)
		}
		if got := s.mainline(t); got != rev1 {
			t.Errorf("the refused integrate moved the mainline to %s (want %s)", got, rev1)
		}

		// Bob reverts a.go and integrates b.go; his checkout then has alice's edit too.
		writeFile(t, bob.dir, "src/a.go", files["src/a.go"])
		rev2 := bob.integrated(t, "bob: document B", 1)
		both := with(files, map[string]string{"src/a.go": aliceA, "src/b.go": bobB})
		assertTree(t, bob.dir, both)
		// The mainline has both edits, as a third checkout and the SDK see it.
		third := filepath.Join(root, "third")
		mustAG(t, admin("checkout", "app", third)...)
		assertTree(t, third, both)
		s.assertMainline(t, rev2, both)

		// Alice's status: no local edits, her lease with time left, and the mainline moved on.
		out = alice.must(t, "status")
		if !containsAll(out, "mainline "+rev2+": it moved on", "no local edits", "leases:") ||
			!regexp.MustCompile(`src/a\.go\s+alice\|a1\s+\d+\s+active\s+in \d+m\d+s\s+`+regexp.QuoteMeta(la.ID)).MatchString(out) {
			t.Errorf("ag status (alice) printed:\n%s\nwant the mainline %s moved on, no local edits, her lease on src/a.go with time left", out, rev2)
		}
		// She releases it; the list shows only bob's lease, the full list hers as released.
		if out := alice.must(t, "lease", "release"); out != "released "+la.ID+" (src/a.go)\n" {
			t.Errorf("ag lease release printed %q, want \"released %s (src/a.go)\"", out, la.ID)
		}
		out = alice.must(t, "lease", "list")
		if strings.Contains(out, la.ID) || !containsLine(out, "src/b.go", bob.holder, "active", lb.ID) {
			t.Errorf("ag lease list after alice's release:\n%s\nwant bob's lease %s only", out, lb.ID)
		}
		if out := alice.must(t, "lease", "list", "--all"); !containsLine(out, "src/a.go", alice.holder, "released", la.ID) {
			t.Errorf("ag lease list --all does not show alice's lease %s released:\n%s", la.ID, out)
		}
		// Bob renews his.
		out = bob.must(t, "lease", "renew", "--ttl", "10m")
		if !strings.HasPrefix(out, "renewed "+lb.ID+" (src/b.go) until ") {
			t.Errorf("ag lease renew printed %q", out)
		}
		if l := findLease(t, bob.must(t, "lease", "list", "--json"), lb.ID); l == nil || !l.ExpiresAt.After(lb.ExpiresAt) || l.Token != lb.Token {
			t.Errorf("bob's renewed lease: %+v; want a later expiry than %v and the same token %d", l, lb.ExpiresAt, lb.Token)
		}

		// A stale token: alice leases c.go for 2s and edits it, but pauses past the expiry;
		// bob is granted the file with a larger token, and alice's late integrate is refused
		// with a message naming him.
		lc := parseLease(t, alice.must(t, "lease", "acquire", "src/util/c.go", "--ttl", "2s", "--json"))
		aliceC := files["src/util/c.go"] + "\n// C, late, says alice.\n"
		writeFile(t, alice.dir, "src/util/c.go", aliceC)
		if out := alice.must(t, "status"); !containsLine(out, "modified", "src/util/c.go") || !containsLine(out, "src/util/c.go", lc.ID) {
			t.Errorf("ag status (alice) does not show her edit of and lease on src/util/c.go:\n%s", out)
		}
		eventually(t, "alice's 2s lease "+lc.ID+" to be listed as expired", func() (bool, string) {
			out := alice.must(t, "lease", "list", "--all", "--json")
			l := findLease(t, out, lc.ID)
			return l != nil && l.State == "LEASE_STATE_EXPIRED" && time.Now().After(l.ExpiresAt), out
		})
		lc2 := parseLease(t, bob.must(t, "lease", "acquire", "src/util/c.go", "--json"))
		if lc2.Holder != bob.holder || lc2.Token <= lc.Token {
			t.Fatalf("bob's lease on src/util/c.go after alice's expired: %+v; want held by %s with a token above %d", lc2, bob.holder, lc.Token)
		}
		out, errOut, code = alice.ag(t, "integrate", "-m", "alice: late edit of c.go")
		if code == 0 || !containsAll(errOut, "failed precondition", "src/util/c.go", bob.holder, "token "+strconv.FormatUint(lc2.Token, 10)) {
			t.Errorf("alice's integrate under her superseded token %d: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a failed precondition naming src/util/c.go, %s and token %d",
				lc.Token, code, out, errOut, bob.holder, lc2.Token)
		}
		if got := s.mainline(t); got != rev2 {
			t.Errorf("alice's refused integrate moved the mainline to %s (want %s)", got, rev2)
		}
		// Her superseded lease is dropped on release, not an error.
		if out := alice.must(t, "lease", "release"); !strings.HasPrefix(out, "dropped "+lc.ID+" (src/util/c.go)") {
			t.Errorf("ag lease release of a superseded lease printed %q, want \"dropped %s (src/util/c.go): ...\"", out, lc.ID)
		}
		bobC := files["src/util/c.go"] + "\n// C is three, says bob.\n"
		writeFile(t, bob.dir, "src/util/c.go", bobC)
		rev3 := bob.integrated(t, "bob: document C", 1)

		// Alice's sync would overwrite her local edit of c.go: refused, naming it, and nothing
		// changes. Once she reverts it, sync brings bob's work in.
		out, errOut, code = alice.ag(t, "sync")
		if code == 0 || !strings.Contains(errOut, "src/util/c.go") {
			t.Errorf("ag sync over alice's local edit of src/util/c.go: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a refusal listing the file", code, out, errOut)
		}
		assertTree(t, alice.dir, with(files, map[string]string{"src/a.go": aliceA, "src/util/c.go": aliceC}))
		writeFile(t, alice.dir, "src/util/c.go", files["src/util/c.go"])
		if out := alice.must(t, "sync"); !regexp.MustCompile(`^synced to ` + regexp.QuoteMeta(rev3) + `: 2 files updated\n$`).MatchString(out) {
			t.Errorf("ag sync (alice) printed %q, want \"synced to %s: 2 files updated\" (b.go and c.go)", out, rev3)
		}
		all := with(both, map[string]string{"src/util/c.go": bobC})
		assertTree(t, alice.dir, all)
		if out := alice.must(t, "status"); !containsAll(out, "mainline "+rev3+": up to date", "no local edits", "no leases held") {
			t.Errorf("ag status (alice) after sync:\n%s\nwant up to date, no local edits, no leases", out)
		}

		// Alice's work reaches bob: under a directory lease she adds a file and deletes one,
		// and bob's sync brings both in.
		ld := parseLease(t, alice.must(t, "lease", "acquire", "docs/", "--json"))
		if strings.Join(ld.Paths, " ") != "docs/" {
			t.Errorf("alice's directory lease: %+v, want the path docs/", ld)
		}
		writeFile(t, alice.dir, "docs/notes.md", "Notes by alice.\n")
		if err := os.Remove(filepath.Join(alice.dir, "docs", "guide.md")); err != nil {
			t.Fatal(err)
		}
		rev4 := alice.integrated(t, "alice: notes instead of the guide", 2)
		final := with(all, map[string]string{"docs/notes.md": "Notes by alice.\n"})
		delete(final, "docs/guide.md")
		if out := bob.must(t, "sync"); out != "synced to "+rev4+": 2 files updated\n" {
			t.Errorf("ag sync (bob) printed %q, want \"synced to %s: 2 files updated\"", out, rev4)
		}
		if out := bob.must(t, "sync"); out != "already at the mainline "+rev4+"\n" {
			t.Errorf("a second ag sync (bob) printed %q, want \"already at the mainline %s\"", out, rev4)
		}
		assertTree(t, alice.dir, final)
		assertTree(t, bob.dir, final)
		s.assertMainline(t, rev4, final)
	})
}

// agentShell runs the ag command line in one agent's checkout, with its token.
type agentShell struct {
	s      *server
	holder string // "<principal>|<label>"
	dir    string // the checkout
	token  string
}

func (a *agentShell) args(args []string) []string {
	return append(args, "-C", a.dir, "--server", a.s.URL, "--token", a.token)
}

func (a *agentShell) ag(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runAG(t, a.args(args)...)
}

func (a *agentShell) must(t *testing.T, args ...string) string {
	t.Helper()
	return mustAG(t, a.args(args)...)
}

// integrated runs `ag integrate -m message`, checks that it printed an integrated change of n
// paths, and answers the new mainline revision.
func (a *agentShell) integrated(t *testing.T, message string, n int) string {
	t.Helper()
	out := a.must(t, "integrate", "-m", message)
	m := regexp.MustCompile(`^change \S+ integrated: (\d+) paths, mainline (\S+)\n$`).FindStringSubmatch(out)
	if m == nil || m[1] != strconv.Itoa(n) {
		t.Fatalf("ag integrate (%s) printed %q, want \"change ID integrated: %d paths, mainline REV\"", a.holder, out, n)
	}
	return m[2]
}

// createAgent creates a principal of role agent with the command line and answers its token.
func createAgent(t *testing.T, s *server, name string) string {
	t.Helper()
	out := mustAG(t, "principal", "create", name, "--role", "agent", "--server", s.URL, "--token", s.AdminToken)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "created principal "+name+" (role agent)") || strings.TrimSpace(lines[1]) == "" {
		t.Fatalf("ag principal create %s printed:\n%s\nwant a line naming the principal, then its token", name, out)
	}
	return strings.TrimSpace(lines[1])
}

// leaseJSON is a lease as `ag lease ... --json` prints it.
type leaseJSON struct {
	ID        string    `json:"id"`
	Paths     []string  `json:"paths"`
	Holder    string    `json:"holder"`
	Token     uint64    `json:"fencingToken,string"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func parseLease(t *testing.T, out string) leaseJSON {
	t.Helper()
	var l leaseJSON
	if err := json.Unmarshal([]byte(out), &l); err != nil || l.ID == "" {
		t.Fatalf("ag lease acquire --json printed %q: %v", out, err)
	}
	return l
}

// findLease answers the lease id in `ag lease list --json` output, or nil.
func findLease(t *testing.T, out, id string) *leaseJSON {
	t.Helper()
	var res struct {
		Leases []leaseJSON `json:"leases"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("ag lease list --json printed %q: %v", out, err)
	}
	for i := range res.Leases {
		if res.Leases[i].ID == id {
			return &res.Leases[i]
		}
	}
	return nil
}

// mainline answers the repository app's mainline revision, through the SDK.
func (s *server) mainline(t *testing.T) string {
	t.Helper()
	res, err := s.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "app"})
	if err != nil {
		t.Fatalf("get repository app: %v", err)
	}
	return res.GetRepository().GetMainline()
}

// assertMainline checks through the SDK that app's mainline is rev and holds exactly want.
func (s *server) assertMainline(t *testing.T, rev string, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	if got := s.mainline(t); got != rev {
		t.Errorf("the mainline is %s, want %s", got, rev)
	}
	tree, err := s.Admin.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "app"})
	if err != nil {
		t.Fatalf("get the mainline's tree: %v", err)
	}
	got := map[string]string{}
	for _, e := range tree.GetEntries() {
		b, err := s.Admin.Blob(ctx, e.GetDigest())
		if err != nil {
			t.Fatalf("get blob %s of %s: %v", e.GetDigest(), e.GetPath(), err)
		}
		if e.GetSize() != uint64(len(b)) {
			t.Errorf("the mainline's %s: size %d, its blob has %d bytes", e.GetPath(), e.GetSize(), len(b))
		}
		got[e.GetPath()] = string(b)
	}
	if tree.GetRevision() != rev {
		t.Errorf("GetTree of the mainline answered revision %s, want %s", tree.GetRevision(), rev)
	}
	diffTrees(t, "the mainline "+rev, got, want)
}

// with answers a copy of base with over's files added or replaced.
func with(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for p, c := range base {
		out[p] = c
	}
	for p, c := range over {
		out[p] = c
	}
	return out
}

func writeFile(t *testing.T, root, path, content string) {
	t.Helper()
	full := filepath.Join(root, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		writeFile(t, root, p, c)
	}
}

// assertTree checks that dir holds exactly the files of want (the checkout's .ag/ aside).
func assertTree(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == ".ag" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		got[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	diffTrees(t, dir, got, want)
}

func diffTrees(t *testing.T, where string, got, want map[string]string) {
	t.Helper()
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: %s is missing", where, p)
		} else if g != w {
			t.Errorf("%s: %s is %q, want %q", where, p, g, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: unexpected file %s", where, p)
		}
	}
}

// containsLine reports whether some line of out contains every one of subs.
func containsLine(out string, subs ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if containsAll(line, subs...) {
			return true
		}
	}
	return false
}
