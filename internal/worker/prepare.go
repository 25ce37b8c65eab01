package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/egress"
)

// The presets' prepare phase (docs/validation.md, "Presets"). Before a run's command, the
// worker runs a phase of its own in the same sandbox, with the candidate's tree read-only,
// that runs none of the candidate's code: for Go, `go list -export -test -deps`, which downloads
// the modules and compiles every package and its tests without linking them (the compiler and
// the module downloader read the code; nothing executes it). That phase may write
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
	goPrepareScript = `go list -e -export -test -deps ./... >/dev/null`
)

// preparedCaches answers the host directories of repository's caches under the worker's
// cache directory, created: the Go build cache and module cache. The name is a digest of the
// repository's: no repository's code reads another's compiled code.
func (v *Validator) preparedCaches(repository string) (goBuild, goMod string, err error) {
	sum := sha256.Sum256([]byte(repository))
	dir := filepath.Join(v.CacheDir, "prepared", hex.EncodeToString(sum[:12]))
	goBuild, goMod = filepath.Join(dir, "go-build"), filepath.Join(dir, "go-mod")
	for _, d := range []string{goBuild, goMod} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", "", fmt.Errorf("prepared caches: %w", err)
		}
	}
	return goBuild, goMod, nil
}

// prepare runs the Go preset's prepare phase of a run whose box is box (in the run directory
// dir), with the repository's caches writable and the network of the worker's egress proxy,
// then shows the caches read-only to the command and answers the command's environment with
// them. A prepare phase that fails is logged; the command runs anyway.
func (v *Validator) prepare(ctx context.Context, job *Job, p client.ValidatePayload, dir, boxRoot, groupFile string, box *boxDirs,
	env []string, timeout time.Duration, limits *runLimit, log *slog.Logger) ([]string, error) {
	goBuild, goMod, err := v.preparedCaches(p.Repository)
	if err != nil {
		return nil, err
	}
	prep := *box
	prep.TreeReadOnly = true
	prep.Mounts = []boxMount{{Host: goBuild, Inner: sandboxGoBuild}, {Host: goMod, Inner: sandboxGoMod}}
	vars := map[string]string{}
	maps.Copy(vars, p.Env)
	if v.Sandbox.shared {
		prep.Network = attest.NetworkShared // the operator gave every run the worker's network
	} else {
		proxy := v.Egress
		if proxy == nil {
			if proxy, err = egress.New(nil, log); err != nil {
				return nil, err
			}
		}
		sockDir := filepath.Join(dir, "prepare")
		if err := os.Mkdir(sockDir, 0o700); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
		sock, session, err := serveEgress(proxy, sockDir)
		if err != nil {
			return nil, err
		}
		defer session.Close()
		prep.Network, prep.EgressSocket = attest.NetworkEgress, sock
		vars = egressEnv(p.Env)
	}
	vars["GOCACHE"], vars["GOMODCACHE"], vars["GOTOOLCHAIN"] = sandboxGoBuild, sandboxGoMod, "local"
	if _, ok := p.Env["GOPROXY"]; !ok {
		// The module proxy only, never "direct": a module it does not serve is not fetched
		// by running git against whatever host the candidate's go.mod names.
		vars["GOPROXY"] = "https://proxy.golang.org"
	}
	vars["GOFLAGS"] = strings.TrimSpace(p.Env["GOFLAGS"] + " -mod=readonly")
	prepEnv, err := v.Sandbox.Env(vars)
	if err != nil {
		return nil, err
	}
	job.Progress("preparing: " + goPrepareScript)
	started := time.Now()
	res, err := runCommand(ctx, runSpec{
		Argv: []string{"/bin/sh", "-c", goPrepareScript}, Dir: box.Tree, Env: prepEnv, Timeout: timeout,
		LogPath: filepath.Join(boxRoot, "prepare.log"), Grace: v.killGrace(), GroupFile: groupFile,
		Sandbox: v.Sandbox, Box: prep, Limits: limits, KeepFileSystem: true, // the command runs on it next
	})
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if res.ExitCode != 0 || res.TimedOut || res.OverLimit != "" {
		log.Info("the prepare phase did not finish; the command runs with what it prepared", "exit_code", res.ExitCode,
			"timed_out", res.TimedOut, "over_limit", res.OverLimit, "output", strings.TrimSpace(res.Tail))
	} else {
		log.Info("prepared", "preset", p.Preset, "took", time.Since(started).Round(time.Millisecond))
	}
	box.Mounts = []boxMount{{Host: goBuild, Inner: sandboxGoBuild, ReadOnly: true}, {Host: goMod, Inner: sandboxGoMod, ReadOnly: true}}
	box.GoCacheProg = true
	return append(env,
		"GOMODCACHE="+sandboxGoMod,
		"GOCACHEPROG="+sandboxGoCacheProg+" "+sandboxGoBuild+" "+sandboxHome+"/.cache/go-run",
		"GOPROXY=off",
		"GOTOOLCHAIN=local",
	), nil
}
