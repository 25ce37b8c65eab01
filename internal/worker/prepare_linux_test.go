package worker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/client"
)

// TestThePreparedCacheServesTheToolchainsTools: since Go 1.25, go builds most of its
// toolchain's tools when first asked (`go tool nm`, the `go tool covdata` of `go test
// -cover`), and keeps the executables in its build cache. A run of the Go preset, whose own
// cache is gone with it, would compile and link them again each time (cobra's tests run `go
// tool nm`: seconds a run). The prepare phase after a run builds them in the repository's
// build cache, and the command's go runs them from there, read-only, through GOCACHEPROG:
// `go tool -n` names an executable under the prepared cache, not one go has just linked in
// its temporary directory, and the tool runs.
func TestThePreparedCacheServesTheToolchainsTools(t *testing.T) {
	t.Parallel()
	sb := seededSandbox(t)
	v := &Validator{Sandbox: sb, CacheDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	c, err := v.preparedCaches("app")
	if err != nil {
		t.Fatal(err)
	}
	// The repository's build cache starts with the standard library, as after its first
	// prepare phase: the seed's copy.
	if err := os.Remove(c.goBuild); err != nil {
		t.Fatal(err)
	}
	if err := copyTree(sb.goSeed, c.goBuild); err != nil {
		t.Fatal(err)
	}
	newRun := func() (*runDir, boxDirs) {
		rd, err := newRunDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rd.remove() })
		tree := filepath.Join(rd.path, "tree")
		writeHonestModule(t, tree)
		box, err := makeBoxDirs(rd.path, tree)
		if err != nil {
			t.Fatal(err)
		}
		return rd, box
	}

	rd, box := newRun()
	done, err := v.prepare(context.Background(), func(string) {}, client.ValidatePayload{Repository: "app", Preset: "go"}, c,
		prepareRun{dir: rd.path, boxRoot: rd.path, groupFile: rd.groupFile(), box: box, tools: true}, 10*time.Minute, v.Logger)
	if err != nil || !done {
		log, _ := os.ReadFile(filepath.Join(rd.path, "prepare.log"))
		t.Fatalf("the prepare phase with the tools: done %v, %v\n%s", done, err, log)
	}

	rd, box = newRun()
	env, err := sb.Env(nil)
	if err != nil {
		t.Fatal(err)
	}
	env = c.commandSetup(&box, env)
	script := `for t in nm covdata; do go tool -n $t || exit; done; go build -o "$TMPDIR/app" ./cmd/app && go tool nm "$TMPDIR/app" | grep -c ' T main.main$'`
	res, err := runCommand(context.Background(), runSpec{
		Argv: []string{"sh", "-c", script}, Dir: box.Tree, Env: env, Timeout: 5 * time.Minute,
		LogPath: filepath.Join(rd.path, "output.log"), Grace: time.Second, Sandbox: sb, Box: box,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the command: exit %d, %v\n%s", res.ExitCode, err, res.Tail)
	}
	lines := strings.Split(strings.TrimSpace(res.Tail), "\n")
	if len(lines) != 3 || lines[2] != "1" {
		t.Fatalf("the command printed\n%s\nwant the paths of nm and covdata, then 1 (nm found main.main in the app)", res.Tail)
	}
	for i, tool := range []string{"nm", "covdata"} {
		if !strings.HasPrefix(lines[i], sandboxGoBuild+"/") || filepath.Base(lines[i]) != tool {
			t.Errorf("go tool -n %s = %s, want the executable the prepare phase left in %s", tool, lines[i], sandboxGoBuild)
		}
	}
}

// TestThePrepareAfterARunBuildsTheToolsOnceADay: the tools are built by the prepare phase
// after a run (off the job's way, never before a command) when the repository's caches have
// no mark of a build in the last toolsEvery.
func TestThePrepareAfterARunBuildsTheToolsOnceADay(t *testing.T) {
	t.Parallel()
	c := testCaches(t)
	now := time.Now()
	if c.toolsBuilt(now) {
		t.Fatal("new caches: the tools are built, want not")
	}
	if err := c.markTools(); err != nil {
		t.Fatal(err)
	}
	// The mark's time is the file system's clock, which may run ahead of time.Now by a tick:
	// pinned to now, the checks below depend on nothing but toolsBuilt.
	if err := os.Chtimes(filepath.Join(c.dir, "tools"), now, now); err != nil {
		t.Fatal(err)
	}
	if !c.toolsBuilt(now) || c.toolsBuilt(now.Add(toolsEvery)) {
		t.Errorf("marked now: built now %v (want true), a day later %v (want false)", c.toolsBuilt(now), c.toolsBuilt(now.Add(toolsEvery)))
	}
	if s := (goPreset{}).script(prepareRun{}); s != goPrepareScript {
		t.Errorf("the prepare phase before a command runs %q, want %q alone", s, goPrepareScript)
	}
	if s := (goPreset{}).script(prepareRun{tools: true}); !strings.HasPrefix(s, goPrepareScript+";") || !strings.Contains(s, goToolsScript) ||
		!strings.HasSuffix(s, "exit $s") {
		t.Errorf("the prepare phase with the tools runs %q, want the prepare, then the tools, with the prepare's status", s)
	}
}
