package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A Go build cache seed: every run starts with an empty build cache of its own, so that no
// run can leave poisoned entries for the next (Go does not check what it reads from its cache
// against anything). Building the standard library then takes most of a small module's
// `go test`. With a seed (SandboxConfig.GoSeed), the worker fills a build cache once, at
// start, by `go build std` in the sandbox, with its own toolchain and no project code, and
// each run gets a copy of it as its GOCACHE. A copy, never links: the run writes only its
// own files, and the seed, which the sandbox never shows, stays as it was filled.

// goSeedFillTimeout bounds `go build std` at start.
const goSeedFillTimeout = 10 * time.Minute

// sandboxGoCache is GOCACHE in the sandbox, under the run's home (Env).
const sandboxGoCache = sandboxHome + "/.cache/go-build"

// FillGoSeed fills the Go build cache seed (SandboxConfig.GoSeed) by running `go build std`
// in the sandbox, in a run directory under workDir with a private GOCACHE, which is then
// copied into place. What was at the seed's path before (an earlier start's) is removed
// first, so that nothing a past run might have touched is used. Until it succeeds, runs start
// with an empty build cache; when it fails they go on doing so.
func (sb *Sandbox) FillGoSeed(ctx context.Context, workDir string) error {
	seed := sb.goSeedDir
	if seed == "" {
		return errors.New("go build cache seed: the sandbox has no seed directory (SandboxConfig.GoSeed)")
	}
	sb.goSeed = ""
	if err := removeAll(seed); err != nil {
		return fmt.Errorf("go build cache seed: remove the old seed: %w", err)
	}
	rd, err := newRunDir(workDir)
	if err != nil {
		return fmt.Errorf("go build cache seed: %w", err)
	}
	defer rd.remove()
	tree := filepath.Join(rd.path, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return fmt.Errorf("go build cache seed: %w", err)
	}
	dirs, err := makeBoxDirs(rd.path, tree)
	if err != nil {
		return fmt.Errorf("go build cache seed: %w", err)
	}
	env, err := sb.Env(map[string]string{"GOTOOLCHAIN": "local", "GOFLAGS": "", "GOPROXY": "off"})
	if err != nil {
		return err
	}
	if err := sb.lookPath("go", dirs, env); err != nil {
		return fmt.Errorf("go build cache seed: %w", err)
	}
	res, err := runCommand(ctx, runSpec{
		Argv: []string{"go", "build", "std"}, Dir: tree, Env: env, Timeout: goSeedFillTimeout,
		LogPath: filepath.Join(rd.path, "output.log"), Grace: time.Second, GroupFile: rd.groupFile(),
		Sandbox: sb, Box: dirs,
	})
	if err != nil {
		return fmt.Errorf("go build cache seed: go build std: %w", err)
	}
	if res.ExitCode != 0 || res.TimedOut || !res.OwnPIDNamespace {
		return fmt.Errorf("go build cache seed: go build std in the sandbox: exit %d, timed out %v:\n%s",
			res.ExitCode, res.TimedOut, strings.TrimSpace(res.Tail))
	}
	cache, _ := sb.hostPath(dirs, sandboxGoCache)
	// Copied beside the seed, then renamed into place: a seed is whole or absent. The work
	// directory may be on another file system than the seed's.
	if err := os.MkdirAll(filepath.Dir(seed), 0o755); err != nil {
		return fmt.Errorf("go build cache seed: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(seed), "."+filepath.Base(seed)+".tmp-")
	if err != nil {
		return fmt.Errorf("go build cache seed: %w", err)
	}
	defer removeAll(tmp)
	if err := copyTree(cache, filepath.Join(tmp, "cache")); err != nil {
		return fmt.Errorf("go build cache seed: %w", err)
	}
	if err := os.Rename(filepath.Join(tmp, "cache"), seed); err != nil {
		return fmt.Errorf("go build cache seed: %w", err)
	}
	sb.goSeed = seed
	return nil
}

// GoSeeded reports whether runs start with a copy of a filled Go build cache seed.
func (sb *Sandbox) GoSeeded() bool { return sb.goSeed != "" }

// seedGoCache copies the Go build cache seed, when there is one, to the run's GOCACHE in its
// home directory, and answers how long that took (0 without a seed).
func (sb *Sandbox) seedGoCache(dirs boxDirs) (time.Duration, error) {
	if sb.goSeed == "" {
		return 0, nil
	}
	start := time.Now()
	dst, _ := sb.hostPath(dirs, sandboxGoCache)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, fmt.Errorf("copy the go build cache seed: %w", err)
	}
	if err := copyTree(sb.goSeed, dst); err != nil {
		return 0, fmt.Errorf("copy the go build cache seed: %w", err)
	}
	return time.Since(start), nil
}

// copyTree copies the directory src to dst, which must not exist: directories and regular
// files only (anything else, a symbolic link first, is refused), with their content and
// permission bits and nothing else. Files are opened without following links, so what is
// copied is what was walked.
func copyTree(src, dst string) error {
	type dirMode struct {
		path string
		mode fs.FileMode
	}
	var dirs []dirMode
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		perm := info.Mode().Perm()
		switch {
		case info.Mode().IsDir():
			// Writable by the worker until its files are in; its own mode after.
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirMode{to, perm})
			return nil
		case info.Mode().IsRegular():
			return copyFile(p, to, perm)
		default:
			return fmt.Errorf("%s is a %s, not a regular file or a directory: refused", p, info.Mode().Type())
		}
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i].path, dirs[i].mode); err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies the regular file src to the new file dst, with permission bits perm.
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.OpenFile(src, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: refused", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(perm) // whatever the umask
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
