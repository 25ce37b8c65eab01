package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ag-coord/ag/internal/repo"
)

// stateDir is where a checkout keeps what ag knows of it.
const stateDir = ".ag"

// checkout is the state of a working directory made by `ag checkout`.
type checkout struct {
	Repository   string            `json:"repository"`
	Server       string            `json:"server"`
	Holder       string            `json:"holder"`
	BaseRevision string            `json:"base_revision"`
	Files        map[string]string `json:"files"` // path → digest as of BaseRevision
	Leases       []heldLease       `json:"leases,omitempty"`

	root string
}

// heldLease is a lease this checkout acquired.
type heldLease struct {
	ID        string    `json:"id"`
	Token     uint64    `json:"token"`
	Paths     []string  `json:"paths"`
	ExpiresAt time.Time `json:"expires_at"`
}

func statePath(root string) string { return filepath.Join(root, stateDir, "checkout.json") }

// findCheckout finds the checkout containing dir.
func findCheckout(dir string) (*checkout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for d := abs; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(statePath(d))
		if err == nil {
			c := &checkout{root: d}
			if err := json.Unmarshal(data, c); err != nil {
				return nil, fmt.Errorf("%s: %w", statePath(d), err)
			}
			if c.Files == nil {
				c.Files = map[string]string{}
			}
			return c, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if d == filepath.Dir(d) {
			return nil, fmt.Errorf("%s is not in a checkout: run `ag checkout REPO DIR` first", abs)
		}
	}
}

// save writes the state atomically, so a crash leaves the old or the new state.
func (c *checkout) save() error {
	if err := os.MkdirAll(filepath.Join(c.root, stateDir), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(c.root) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, statePath(c.root))
}

// tokens answers the fencing tokens of the leases this checkout holds.
func (c *checkout) tokens() []uint64 {
	out := make([]uint64, 0, len(c.Leases))
	for _, l := range c.Leases {
		out = append(out, l.Token)
	}
	return out
}

// localFile is a file found in a directory tree.
type localFile struct {
	digest string
	size   int64
}

// scanTree answers the regular files under root by their repository paths, skipping the
// checkout's state, .git, and symbolic links (never followed, so nothing outside root is read).
func scanTree(root string) (map[string]localFile, []string, error) {
	files := map[string]localFile{}
	var skipped []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == stateDir || rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			skipped = append(skipped, rel)
			return nil
		}
		if err := repo.ValidatePath(rel, false); err != nil {
			return fmt.Errorf("%s: %v", rel, err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[rel] = localFile{digest: repo.Digest(data), size: int64(len(data))}
		return nil
	})
	return files, skipped, err
}

// localEdit is a difference between the checkout's files and its base revision.
type localEdit struct {
	path   string
	kind   string // "added", "modified", "deleted"
	digest string // of the local content, unless deleted
}

// localEdits compares the files on disk with the base revision's.
func (c *checkout) localEdits() ([]localEdit, error) {
	files, _, err := scanTree(c.root)
	if err != nil {
		return nil, err
	}
	var edits []localEdit
	for p, f := range files {
		base, ok := c.Files[p]
		switch {
		case !ok:
			edits = append(edits, localEdit{path: p, kind: "added", digest: f.digest})
		case base != f.digest:
			edits = append(edits, localEdit{path: p, kind: "modified", digest: f.digest})
		}
	}
	for p := range c.Files {
		if _, ok := files[p]; !ok {
			edits = append(edits, localEdit{path: p, kind: "deleted"})
		}
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].path < edits[j].path })
	return edits, nil
}

// repoPath turns a path given on the command line into a repository path; a trailing '/' is
// kept. A relative path is taken relative to base, the directory the command works in (-C, as
// with git -C; "." by default).
func (c *checkout) repoPath(base, arg string) (string, error) {
	dir := strings.HasSuffix(arg, "/") || strings.HasSuffix(arg, string(filepath.Separator))
	full := arg
	if !filepath.IsAbs(full) {
		full = filepath.Join(base, full)
	}
	abs, err := filepath.Abs(full)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(c.root, abs)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("%s is not inside the checkout %s", arg, c.root)
	}
	rel = filepath.ToSlash(rel)
	if !dir {
		if st, err := os.Stat(abs); err == nil && st.IsDir() {
			dir = true
		}
	}
	if dir {
		rel += "/"
	}
	return rel, repo.ValidatePath(rel, true)
}

// writeFile writes content at a repository path under root, creating directories.
func writeFile(root, path string, content []byte) error {
	full := filepath.Join(root, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	return os.WriteFile(full, content, 0o644)
}

// removeFile deletes a repository path under root and the directories it leaves empty.
func removeFile(root, path string) error {
	full := filepath.Join(root, filepath.FromSlash(path))
	if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for d := filepath.Dir(full); d != root && strings.HasPrefix(d, root); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return nil
}

func humanDuration(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return d.Round(time.Second).String()
}
