//go:build unix

package e2e

import (
	"path/filepath"
	"testing"
	"time"
)

// goModule is a Go module without dependencies, whose test checks Add.
var goModule = map[string]string{
	"go.mod":        "module example.com/calc\n\ngo 1.22\n",
	"calc.go":       "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a + b }\n",
	"calc_test.go":  "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"2 + 3 is not 5\")\n\t}\n}\n",
	"sub/sub.go":    "package sub\n\n// One is one.\nfunc One() int { return 1 }\n",
	"sub/readme.md": "# sub\n",
}

// poisonTest is a test an agent lands to poison the worker's caches: it tries to overwrite
// every file of the prepared caches it can see, to add files beside them, and to put entries
// through go's own cache program, all marked so that the test below finds them; it passes
// whatever it managed.
const poisonTest = `package calc

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The marker is made at run time: written in the source, it would be in the compiled
// package the prepare phase caches, as a constant.
func marker() string {
	b := []byte("TSET-A-YB-DENOSIOP")
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

func TestPoisonTheCaches(t *testing.T) {
	marker := marker()
	for _, dir := range []string{"/ag/cache", os.Getenv("GOMODCACHE"), os.Getenv("GOCACHE")} {
		if dir == "" {
			continue
		}
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if werr := os.WriteFile(filepath.Join(path, "planted-"+marker), []byte(marker), 0o644); werr != nil {
					t.Logf("plant in %s: %v", path, werr)
				}
				return nil
			}
			os.Chmod(path, 0o644)
			if werr := os.WriteFile(path, []byte(marker), 0o644); werr != nil {
				t.Logf("overwrite %s: %v", path, werr)
			}
			return nil
		})
	}
}
`

// TestAPresetsCachesCannotBePoisonedByATest: with `--preset go`, a prepare phase that runs
// none of the candidate's code fills the worker's caches for the repository, and the command
// sees them read-only. An agent lands a test that overwrites every cache file it can reach;
// the worker's caches hold none of what it wrote, and the next change, which breaks Add, is
// rejected, exactly as without the caches.
func TestAPresetsCachesCannotBePoisonedByATest(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		g := startGate(t, backend, goModule, "--preset", "go", "--timeout", "5m", "--", "go", "test", "./...")
		cache := t.TempDir()
		g.worker(t, "w1", 30*time.Second, "--cache-dir", cache)
		mallory := g.agent(t, "mallory")

		edit(t, mallory, "poison_test.go", poisonTest)
		// The first validation of the repository compiles the standard library into its
		// caches: longer than the harness waits for a command.
		landEventually(t, g, mallory, "mallory: a test that poisons the caches")
		// The compiled standard library and module are there, as the prepare phase wrote them.
		checkNotPoisoned(t, filepath.Join(cache, "prepared"), 50)

		mallory.must(t, "sync")
		edit(t, mallory, "calc.go", "package calc\n\n// Add adds, badly.\nfunc Add(a, b int) int { return a - b }\n")
		stdout, stderr, code := mallory.ag(t, "integrate", "-m", "mallory: break Add")
		rejected(t, "mallory", stdout, stderr, code, "2 + 3 is not 5")
	})
}
