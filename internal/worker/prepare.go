package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/egress"
	"github.com/ag-coord/ag/internal/repo"
)

// The presets' prepare phase (docs/validation.md, "Presets"). Before a run's command, the
// worker runs a phase of its own in the same sandbox, with the candidate's tree read-only,
// that runs none of the candidate's code: for Go, `go test -c`, which downloads the modules,
// compiles and vets every package and its tests, and links the test binaries without running
// them (the compiler, vet and the module downloader read the code; nothing executes it). The
// command's `go test` then finds its compiles and its vet in the cache. That phase may write
// the repository's caches, shown at sandboxCaches. The command then sees them read-only, so
// nothing a run does can change what a later run reads: its go stores what it builds through
// GOCACHEPROG in the run's own directory (gocacheprog.go).
const (
	sandboxCaches      = "/ag/cache"
	sandboxGoBuild     = sandboxCaches + "/go-build"
	sandboxGoMod       = sandboxCaches + "/go-mod"
	sandboxGoCacheProg = "/ag/go-cache-prog"
	// prepareScript is the Go preset's prepare phase, run by the sandbox's shell. GOFLAGS
	// -mod=readonly keeps go from writing go.mod or go.sum, the only files of the tree it
	// would write (and which a link could point elsewhere). Its failures are not the
	// candidate's verdict: the command meets them again and says so.
	goPrepareScript = `go test -c -o "$TMPDIR/ag-prepare/" ./...`
	// goToolsScript builds the tools of the Go toolchain that a test may run on what it builds
	// and that go builds when first asked: since Go 1.25 a release ships prebuilt only those a
	// build runs (compile, link, vet, ...), and `go tool nm`, `go tool objdump`, the `go tool
	// covdata` of `go test -cover` and the like are compiled and linked on first use, their
	// executables kept in the build cache (docs/benchmarks.md, "The Go preset on real projects":
	// cobra's tests run `go tool nm`, which cost each run seconds). `go tool -n NAME` builds
	// one and prints its path, running nothing; the code is the toolchain's own, not the
	// candidate's. Not the profilers (pprof, trace: as much again of the cache as the others
	// together) nor the toolchain's own builders (dist, distpack). It runs outside the tree (a
	// tool of the toolchain ignores go.mod), and its failures are nobody's: a run that asks
	// for a tool it does not find builds it, as before.
	goToolsScript = `cd / && tools=$(go env GOTOOLDIR) && for t in addr2line buildid covdata nm objdump pack test2json; do ` +
		`[ -e "$tools/$t" ] || go tool -n "$t" >/dev/null 2>&1; done`
	// toolsEvery is how often the prepare phase after a run builds the tools again: a check
	// that finds them all built still starts go eight times, and go's cache drops an entry
	// unused for five days (the command reads the cache through GOCACHEPROG, which marks
	// nothing used; `go tool -n` of a tool it finds marks it).
	toolsEvery = 24 * time.Hour
)

// repoCaches are the host directories of one repository's prepared caches.
type repoCaches struct {
	dir, goBuild, goMod string
}

// preparedCaches answers the host directories of repository's caches under the worker's
// cache directory, created: the Go build cache and module cache. The name is a digest of the
// repository's: no repository's code reads another's compiled code.
func (v *Validator) preparedCaches(repository string) (repoCaches, error) {
	sum := sha256.Sum256([]byte(repository))
	dir := filepath.Join(v.CacheDir, "prepared", hex.EncodeToString(sum[:12]))
	c := repoCaches{dir: dir, goBuild: filepath.Join(dir, "go-build"), goMod: filepath.Join(dir, "go-mod")}
	for _, d := range []string{c.goBuild, c.goMod, filepath.Join(dir, "modules")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return repoCaches{}, fmt.Errorf("prepared caches: %w", err)
		}
	}
	return c, nil
}

// modulesDigest answers a digest of the files of tree that decide which modules a Go build
// needs (every go.mod, go.sum, go.work and go.work.sum).
func modulesDigest(tree repo.Tree) string {
	h := sha256.New()
	for _, e := range tree {
		switch path.Base(e.Path) {
		case "go.mod", "go.sum", "go.work", "go.work.sum":
			fmt.Fprintf(h, "%s %s %s\n", e.Path, e.GitMode(), e.Digest)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hasModules reports whether a prepare phase finished for a tree of these module files: the
// module cache then holds every module such a tree needs, and the command, which has no
// network, needs no prepare phase before it. The marks are the worker's, beside the caches the
// sandbox shows.
func (c repoCaches) hasModules(digest string) bool {
	_, err := os.Stat(filepath.Join(c.dir, "modules", digest))
	return err == nil
}

func (c repoCaches) markModules(digest string) error {
	return os.WriteFile(filepath.Join(c.dir, "modules", digest), nil, 0o644)
}

// toolsBuilt reports whether a prepare phase built the toolchain's tools (goToolsScript) in
// the build cache less than toolsEvery ago. The mark is the worker's, beside the caches.
func (c repoCaches) toolsBuilt(now time.Time) bool {
	fi, err := os.Stat(filepath.Join(c.dir, "tools"))
	return err == nil && now.Sub(fi.ModTime()) < toolsEvery
}

func (c repoCaches) markTools() error {
	return os.WriteFile(filepath.Join(c.dir, "tools"), nil, 0o644)
}

// commandSetup shows the caches read-only to the command of box and answers its environment
// with them: go reads the build cache through GOCACHEPROG (gocacheprog.go).
func (c repoCaches) commandSetup(box *boxDirs, env []string) []string {
	box.Mounts = []boxMount{{Host: c.goBuild, Inner: sandboxGoBuild, ReadOnly: true}, {Host: c.goMod, Inner: sandboxGoMod, ReadOnly: true}}
	box.GoCacheProg = true
	return append(env,
		"GOMODCACHE="+sandboxGoMod,
		"GOCACHEPROG="+sandboxGoCacheProg+" "+sandboxGoBuild+" "+sandboxHome+"/.cache/go-run",
		"GOPROXY=off",
		"GOTOOLCHAIN=local",
	)
}

// prepareRun is where a prepare phase runs: a run's directory, the root of its file system,
// its process group file, its box and limits.
type prepareRun struct {
	dir, boxRoot, groupFile string
	box                     boxDirs
	limits                  *runLimit
	// keep: a command runs on the same file system after it.
	keep bool
	// tools: the phase also builds the toolchain's tools (goToolsScript).
	tools bool
	// key: the preset's digest of the files of the tree the phase prepares for.
	key string
}

// prepare runs the prepare phase of p's preset in r, with the caches it writes writable and the
// network of the worker's egress proxy, and reports whether it finished. One that does not
// finish is logged: it is not the candidate's verdict.
func (v *Validator) prepare(ctx context.Context, progress func(string), p client.ValidatePayload, c repoCaches, r prepareRun,
	timeout time.Duration, log *slog.Logger) (bool, error) {
	preset, ok := workerPresets[p.Preset]
	if !ok {
		return false, fmt.Errorf("prepare: no preset %q", p.Preset)
	}
	prep := r.box
	prep.TreeReadOnly = true
	vars := map[string]string{}
	maps.Copy(vars, p.Env)
	if v.Sandbox.shared {
		prep.Network = attest.NetworkShared // the operator gave every run the worker's network
	} else {
		proxy := v.Egress
		if proxy == nil {
			var err error
			if proxy, err = egress.New(nil, log); err != nil {
				return false, err
			}
		}
		sockDir := filepath.Join(r.dir, "prepare")
		if err := os.Mkdir(sockDir, 0o700); err != nil {
			return false, fmt.Errorf("prepare: %w", err)
		}
		sock, session, err := serveEgress(proxy, sockDir)
		if err != nil {
			return false, err
		}
		defer session.Close()
		prep.Network, prep.EgressSocket = attest.NetworkEgress, sock
		vars = egressEnv(p.Env)
	}
	mounts, err := preset.prepareSetup(c, r.key, vars, p)
	if err != nil {
		return false, fmt.Errorf("prepared caches: %w", err)
	}
	prep.Mounts = mounts
	prepEnv, err := v.Sandbox.Env(vars)
	if err != nil {
		return false, err
	}
	progress("preparing: " + preset.describe())
	started := time.Now()
	res, err := runCommand(ctx, runSpec{
		Argv: []string{"/bin/sh", "-c", preset.script(r)}, Dir: r.box.Tree, Env: prepEnv, Timeout: timeout,
		LogPath: filepath.Join(r.boxRoot, "prepare.log"), Grace: v.killGrace(), GroupFile: r.groupFile,
		Sandbox: v.Sandbox, Box: prep, Limits: r.limits, KeepFileSystem: r.keep,
	})
	if err != nil {
		return false, fmt.Errorf("prepare: %w", err)
	}
	if res.ExitCode != 0 || res.TimedOut || res.OverLimit != "" {
		log.Info("the prepare phase did not finish", "exit_code", res.ExitCode, "timed_out", res.TimedOut,
			"over_limit", res.OverLimit, "output", strings.TrimSpace(res.Tail))
		// Said where the pusher reads progress: a module the proxy does not serve, or a host
		// --egress-allow does not name, fails the command later with a message about no network.
		tail := strings.TrimSpace(res.Tail)
		if i := strings.LastIndexByte(tail, '\n'); i >= 0 {
			tail = tail[i+1:]
		}
		progress(progressLine("the prepare phase failed, the command runs anyway: " + tail))
		return false, nil
	}
	log.Info("prepared", "preset", p.Preset, "tools", r.tools, "took", time.Since(started).Round(time.Millisecond))
	return true, nil
}

// presetBeforeCommand sets a run of p's preset up: when the repository's caches have not been
// prepared for the files of the tree the run sees that decide them (the first run, or a change
// of go.mod, package-lock.json or a requirements file), the prepare phase runs first, since the
// command has no network to fetch what they name; then the caches are shown read-only to the
// command, whose environment it answers. One prepare phase at a time a repository: another run
// waiting for it then finds the caches prepared.
func (v *Validator) presetBeforeCommand(ctx context.Context, job *Job, p client.ValidatePayload, seen repo.Tree, r prepareRun,
	box *boxDirs, env []string, timeout time.Duration, log *slog.Logger) ([]string, error) {
	preset, ok := workerPresets[p.Preset]
	if !ok {
		return env, nil
	}
	c, err := v.preparedCaches(p.Repository)
	if err != nil {
		return nil, err
	}
	key := preset.key(seen)
	unlock, err := v.lockPrepare(ctx, c.dir)
	if err != nil {
		return nil, err
	}
	prepared := c.hasModules(key)
	if !prepared {
		r.box, r.keep, r.key = *box, true, key
		prepared, err = v.prepare(ctx, job.Progress, p, c, r, timeout, log)
		if err == nil && prepared {
			err = c.markModules(key)
		}
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("prepared caches: %w", err)
	}
	return preset.commandSetup(c, key, seen, box, env, prepared)
}

// lockPrepare holds the prepare phases of the caches in dir to one at a time, until the
// function it answers is called, or answers ctx's cause when ctx ends first.
func (v *Validator) lockPrepare(ctx context.Context, dir string) (func(), error) {
	l, _ := v.preparing.LoadOrStore(dir, make(chan struct{}, 1))
	held := l.(chan struct{})
	select {
	case held <- struct{}{}:
		return func() { <-held }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// warmLater runs the Go preset's prepare phase on a fresh checkout of tree (the candidate
// as its run saw it) once the job's outcome is known, off its way: the next candidates, which
// hold most of it, find it compiled. One at a time a repository; a repository being warmed is
// not warmed again. Nothing of it is a verdict.
func (v *Validator) warmLater(p client.ValidatePayload, seen repo.Tree, timeout time.Duration, asked Limits, log *slog.Logger) {
	if _, busy := v.warming.LoadOrStore(p.Repository, true); busy {
		return
	}
	go func() {
		defer v.warming.Delete(p.Repository)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := v.warm(ctx, p, seen, timeout, asked, log); err != nil {
			log.Warn("could not prepare the caches after the run", "err", err)
		}
	}()
}

// warm checks seen out in a run directory of its own, held to the run's limits, and runs the
// prepare phase on it, with the toolchain's tools when they were not built in the last
// toolsEvery.
func (v *Validator) warm(ctx context.Context, p client.ValidatePayload, seen repo.Tree, timeout time.Duration, asked Limits, log *slog.Logger) error {
	c, err := v.preparedCaches(p.Repository)
	if err != nil {
		return err
	}
	rd, err := newRunDir(v.workDir())
	if err != nil {
		return err
	}
	defer func() {
		if err := rd.remove(); err != nil {
			log.Warn("could not remove the work directory", "dir", rd.path, "err", err)
		}
	}()
	boxRoot := rd.path
	var limits *runLimit
	if v.Limits != nil {
		limits, err = v.Limits.prepare(rd.path, asked)
		defer func() {
			if err := limits.release(); err != nil {
				log.Warn("could not release the run's cgroup or file system", "err", err)
			}
		}()
		if err != nil {
			return err
		}
		boxRoot = limits.root
	}
	checkout := filepath.Join(boxRoot, "tree")
	if err := os.Mkdir(checkout, 0o755); err != nil {
		return err
	}
	if _, err := v.materialize(ctx, checkout, seen); err != nil {
		return err
	}
	box, err := makeBoxDirs(boxRoot, checkout)
	if err != nil {
		return err
	}
	// The toolchain's tools once a day, here only: the prepare phase before a command is on
	// the job's way.
	tools := !c.toolsBuilt(time.Now())
	key := modulesDigest(seen)
	done, err := v.prepare(ctx, func(string) {}, p, c, prepareRun{dir: rd.path, boxRoot: boxRoot, groupFile: rd.groupFile(),
		box: box, limits: limits, tools: tools, key: key}, timeout, log)
	if err == nil && done {
		err = c.markModules(key)
	}
	if err == nil && done && tools {
		err = c.markTools()
	}
	return err
}
