package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

// The Go build cache seed is filled once per test binary (`go build std` takes tens of
// seconds) and shared by the tests below, which only read it.
var goSeed struct {
	once sync.Once
	sb   *Sandbox
	dir  string // holds the seed; removed by TestMain's cleanup below
	took time.Duration
	err  error
}

// seededSandbox answers the sandbox whose Go build cache seed was filled at the first call.
func seededSandbox(t testing.TB) *Sandbox {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	goSeed.once.Do(func() {
		if goSeed.dir, goSeed.err = os.MkdirTemp("", "ag-go-seed-test-"); goSeed.err != nil {
			return
		}
		cfg := SandboxConfig{GoSeed: filepath.Join(goSeed.dir, "cache", "go-build-seed"), PATH: os.Getenv("PATH")}
		if goSeed.sb, goSeed.err = NewSandbox(cfg); goSeed.err != nil {
			return
		}
		start := time.Now()
		goSeed.err = goSeed.sb.FillGoSeed(context.Background(), goSeed.dir)
		goSeed.took = time.Since(start)
	})
	testSandbox(t, SandboxConfig{}) // fails the test without bwrap
	if goSeed.err != nil {
		t.Fatalf("FillGoSeed: %v", goSeed.err)
	}
	t.Logf("the seed was filled in %v", goSeed.took.Round(time.Millisecond))
	return goSeed.sb
}

func TestMain(m *testing.M) {
	// pgtest.Run stops the private PostgreSQL cluster the tests of batch_test.go start: left
	// running, one per test binary, it outlived every run of the package.
	code := pgtest.Run(m)
	if goSeed.dir != "" {
		_ = removeAll(goSeed.dir)
	}
	os.Exit(code)
}

// hashTree answers a digest of every path, type, mode and content under dir.
func hashTree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := p + " " + info.Mode().String()
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	h := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(h[:])
}

// TestGoSeedIsUsed ensures the seed filled at start is in each run's GOCACHE, and that an honest
// `go test` of a module of the standard library passes with it.
func TestGoSeedIsUsed(t *testing.T) {
	t.Parallel()
	sb := seededSandbox(t)
	if !sb.GoSeeded() {
		t.Fatal("FillGoSeed succeeded and the sandbox says it has no seed")
	}
	if n, _ := os.ReadDir(sb.goSeed); len(n) < 256 {
		t.Fatalf("the seed %s holds %d entries, want the cache's 256 directories and more", sb.goSeed, len(n))
	}
	res, out, err := runIn(t, t.TempDir(), sb, `ls "$(go env GOCACHE)" | wc -l`, nil, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("runIn: %+v, %v\n%s", res, err, out)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || n == 0 {
		t.Errorf("the run's GOCACHE holds %q entries, want the seed's", out)
	}

	runHonestGoTest(t, sb)
}

// TestGoSeedIsNotWrittenByRuns ensures a run that overwrites, removes and adds files in its
// GOCACHE leaves the seed as it was, byte for byte, and the next run sees none of it.
func TestGoSeedIsNotWrittenByRuns(t *testing.T) {
	t.Parallel()
	sb := seededSandbox(t)
	before := hashTree(t, sb.goSeed)
	workDir := t.TempDir()
	poison := `set -e
c="$(go env GOCACHE)"
find "$c" -type f | while read -r f; do chmod u+w "$f"; printf poisoned > "$f"; done
chmod 0777 "$c"/00
rm -rf "$c"/ff
echo poisoned > "$c"/poisoned-entry
echo done`
	res, out, err := runIn(t, workDir, sb, poison, nil, time.Minute)
	if err != nil || res.ExitCode != 0 || !strings.Contains(out, "done") {
		t.Fatalf("the poisoning run: %+v, %v\n%s", res, err, out)
	}
	if after := hashTree(t, sb.goSeed); after != before {
		t.Fatal("a run changed the Go build cache seed")
	}
	check := `c="$(go env GOCACHE)"
test -e "$c"/poisoned-entry && echo "sees the entry"
test -d "$c"/ff || echo "ff is gone"
grep -rl poisoned "$c" | head -3
echo checked`
	res, out, err = runIn(t, workDir, sb, check, nil, time.Minute)
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(out) != "checked" {
		t.Fatalf("the next run sees what the first one did to its cache: %+v, %v\n%s", res, err, out)
	}
}

// TestGoSeedFillFailureMeansAnEmptyCache ensures a seed that cannot be filled (no go in the
// sandbox) is an error, and runs then start with an empty build cache, as without a seed; and
// that the seed directory is never one the sandbox shows.
func TestGoSeedFillFailureMeansAnEmptyCache(t *testing.T) {
	t.Parallel()
	testSandbox(t, SandboxConfig{})
	dir := t.TempDir()
	seed := filepath.Join(dir, "cache", "go-build-seed")
	if err := os.MkdirAll(filepath.Join(seed, "00"), 0o755); err != nil { // an earlier start's
		t.Fatal(err)
	}
	sb, err := NewSandbox(SandboxConfig{GoSeed: seed, PATH: "/bin"}) // go is in neither /bin nor the default PATH
	if err != nil {
		t.Fatal(err)
	}
	err = sb.FillGoSeed(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), `"go"`) {
		t.Fatalf("FillGoSeed without go in the sandbox = %v, want an error that names go", err)
	}
	if sb.GoSeeded() || exists(seed) {
		t.Errorf("after a failed fill, seeded %v, the old seed is there: %v", sb.GoSeeded(), exists(seed))
	}
	res, out, err := runIn(t, dir, sb, `test -e /ag/home/.cache && echo "has a cache"; echo ran`, nil, 10*time.Second)
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(out) != "ran" {
		t.Errorf("a run after a failed fill: %+v, %v\n%s; want an empty home", res, err, out)
	}

	toolchain := filepath.Join(dir, "toolchain")
	if err := os.Mkdir(toolchain, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSandbox(SandboxConfig{ReadOnly: []string{toolchain}, GoSeed: filepath.Join(toolchain, "seed")}); err == nil {
		t.Error("NewSandbox accepted a seed in a directory the sandbox shows")
	}
}

// TestCopyTreeRefusesLinks ensures the seed's copy takes regular files and directories only,
// with their modes.
func TestCopyTreeRefusesLinks(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "a"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a", "f"), []byte("content"), 0o640); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := copyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a", "f")); err != nil || string(b) != "content" {
		t.Errorf("the copy of a/f: %q, %v", b, err)
	}
	for p, want := range map[string]fs.FileMode{"a": 0o750 | fs.ModeDir, "a/f": 0o640} {
		if fi, err := os.Stat(filepath.Join(dst, p)); err != nil || fi.Mode() != want {
			t.Errorf("the copy of %s: %v, %v; want mode %v", p, fi.Mode(), err, want)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := copyTree(src, filepath.Join(t.TempDir(), "copy")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("copyTree of a tree with a symbolic link = %v, want a refusal", err)
	}
}

// BenchmarkGoTestInSandbox measures what the seed saves: an honest `go test ./...` of a small
// module of the standard library, in the sandbox, with an empty build cache and with a copy of
// the seed (whose copy is counted). It reports the median of the runs.
//
//	go test -run '^$' -bench GoTestInSandbox -benchtime 5x ./internal/worker/
func BenchmarkGoTestInSandbox(b *testing.B) {
	for _, mode := range []string{"empty", "seeded"} {
		b.Run(mode, func(b *testing.B) {
			sb := testSandbox(b, SandboxConfig{})
			if mode == "seeded" {
				sb = seededSandbox(b)
			}
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				rd, err := newRunDir(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				tree := filepath.Join(rd.path, "tree")
				writeHonestModule(b, tree)
				box, err := makeBoxDirs(rd.path, tree)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sb.seedGoCache(box); err != nil {
					b.Fatal(err)
				}
				env, _ := sb.Env(map[string]string{"GOFLAGS": "-count=1", "GOTOOLCHAIN": "local", "GOPROXY": "off"})
				res, err := runCommand(context.Background(), runSpec{
					Argv: []string{"go", "test", "./..."}, Dir: tree, Env: env, Timeout: 5 * time.Minute,
					LogPath: filepath.Join(rd.path, "output.log"), Grace: time.Second, Sandbox: sb, Box: box,
				})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("go test: exit %d, %v\n%s", res.ExitCode, err, res.Tail)
				}
				took = append(took, time.Since(start))
				_ = rd.remove()
			}
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			b.ReportMetric(took[len(took)/2].Seconds(), "median-s")
		})
	}
}
