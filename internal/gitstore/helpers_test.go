package gitstore

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

// gitEnv is the environment of the git commands the tests run: no user or system
// configuration, no prompt, no proxy, fixed identities and dates.
func gitEnv(t testing.TB) []string {
	home := t.TempDir()
	env := []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"NO_PROXY=*",
		"GIT_AUTHOR_NAME=Ada Agent",
		"GIT_AUTHOR_EMAIL=ada@agents.example",
		"GIT_AUTHOR_DATE=1700000000 +0200",
		"GIT_COMMITTER_NAME=ag",
		"GIT_COMMITTER_EMAIL=ag@ag.example",
		"GIT_COMMITTER_DATE=1700000100 -0130",
		"LC_ALL=C",
	}
	return env
}

// git runs git in dir with stdin and answers its standard output; it fails the test when git
// fails.
func git(t testing.TB, env []string, dir string, stdin []byte, args ...string) string {
	t.Helper()
	out, errOut, err := gitRun(env, dir, stdin, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func gitRun(env []string, dir string, stdin []byte, args ...string) (string, string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func needGit(t testing.TB) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("these tests compare with the git command line, which is not installed")
	}
}

// countingStorer counts the objects written through it, and is safe for concurrent use (the
// handler's goroutines read while a test writes the next commit).
type countingStorer struct {
	mu sync.RWMutex
	storer.EncodedObjectStorer
	writes int
}

func newStorer() *countingStorer {
	return &countingStorer{EncodedObjectStorer: memory.NewStorage()}
}

func (s *countingStorer) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.EncodedObjectStorer.SetEncodedObject(o)
}

func (s *countingStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.EncodedObjectStorer.EncodedObject(t, h)
}

func (s *countingStorer) HasEncodedObject(h plumbing.Hash) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.EncodedObjectStorer.HasEncodedObject(h)
}

func (s *countingStorer) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.EncodedObjectStorer.EncodedObjectSize(h)
}

func (s *countingStorer) Writes() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.writes
}

// packingStorer is a countingStorer that answers trees packed and is handed the trees
// UpdateTree splices, as the store's GitObjects is; it checks that each tree it is handed is
// the one stored under its id.
type packingStorer struct {
	*countingStorer
	t *testing.T
}

func (s packingStorer) PackedTree(id plumbing.Hash) (*PackedTree, error) {
	o, err := s.EncodedObject(plumbing.TreeObject, id)
	if err != nil {
		return nil, err
	}
	data, err := ObjectData(o)
	if err != nil {
		return nil, err
	}
	return PackTree(data)
}

func (s packingStorer) KeepPacked(id plumbing.Hash, t *PackedTree) {
	stored, err := s.PackedTree(id)
	if err != nil {
		s.t.Errorf("kept tree %s is not stored: %v", id, err)
		return
	}
	if stored.data != t.data || !slices.Equal(stored.entries, t.entries) {
		s.t.Errorf("kept tree %s differs from the one stored under its id", id)
	}
}
