package checkout

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/repo"
)

// TestAHandEditedCheckoutStateIsRefused ensures the checkout's own state, which ag writes, is
// checked when it is read, as the server's tree is: ag reverts files to the paths kept there
// and removes .ag/conflicts/<digest> by the digests kept there, so a state file edited by hand,
// copied from someone else or damaged must not make it write into .git or remove a file of the
// user's.
func TestAHandEditedCheckoutStateIsRefused(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for name, state := range map[string]string{
		"a file in .git":                  `{"repository":"app","files":{"a/.git/hooks/pre-commit":"` + digest + `"}}`,
		"a file out of the checkout":      `{"repository":"app","files":{"../victim.txt":"` + digest + `"}}`,
		"a digest that is a path":         `{"repository":"app","files":{"a/x.txt":"` + digest + `"},"conflicts":{"a/x.txt":{"ours":"../../victim.txt"}}}`,
		"a file's digest that is not one": `{"repository":"app","files":{"a/x.txt":"../x"}}`,
		"a lease of .ag":                  `{"repository":"app","leases":[{"id":"l1","token":1,"paths":[".ag/"]}]}`,
		"not JSON":                        `{"repository":`,
	} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, StateDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(statePath(root), []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Find(root)
		if err == nil || !strings.Contains(err.Error(), "is damaged") || !strings.Contains(err.Error(), "run `ag checkout` again") {
			t.Errorf("%s: findCheckout = %v, want it refused as damaged, saying what to do", name, err)
		}
	}

	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, StateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	good := `{"repository":"app","files":{"a/x.txt":"` + digest + `"},"conflicts":{"a/x.txt":{"ours":"` + digest + `"}},"leases":[{"id":"l1","token":1,"paths":["a/"]}]}`
	if err := os.WriteFile(statePath(root), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(root); err != nil {
		t.Errorf("a state ag wrote: %v", err)
	}
}

// TestAHandEditedIndexIsRefused ensures the paths of a checkout's index, which ag writes, are
// checked before ag writes or removes a file by them: an index edited by hand, copied from
// someone else or damaged must not make a revert write into .git or out of the checkout, and
// checkout.json must not name another file as its index.
func TestAHandEditedIndexIsRefused(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, path := range []string{"a/.git/hooks/pre-commit", "../victim.txt", ".ag/checkout.json", "/etc/passwd"} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, StateDir), 0o755); err != nil {
			t.Fatal(err)
		}
		co := &Checkout{Repository: "app", root: root}
		co.SetBase("rev_1", regularFiles(map[string]string{"fine.txt": digest}))
		if err := co.Save(); err != nil {
			t.Fatal(err)
		}
		// The hostile path in the index, written as ag writes indexes: only its content lies.
		hostile, err := baseIndex(regularFiles(map[string]string{path: digest}), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, StateDir, co.Index), hostile.encode(), 0o644); err != nil {
			t.Fatal(err)
		}
		fresh, err := Find(root)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fresh.BaseFiles(); err == nil || !strings.Contains(err.Error(), "is damaged") {
			t.Errorf("%s in the index: baseFiles = %v, want it refused as damaged", path, err)
		}
		fresh, _ = Find(root)
		if edits, err := fresh.LocalEdits(); err == nil || !strings.Contains(err.Error(), "is damaged") {
			t.Errorf("%s in the index: localEdits = %v, %v; want it refused as damaged (a revert would write it back)", path, edits, err)
		}
	}
	for _, name := range []string{"../x", "checkout.json", "index-../../x", "index-"} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, StateDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(statePath(root), []byte(`{"repository":"app","index":"`+name+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Find(root); err == nil || !strings.Contains(err.Error(), "is damaged") {
			t.Errorf("checkout.json naming %q as its index: %v, want it refused as damaged", name, err)
		}
	}
}

// TestIntegrateReadsNothingOutsideTheCheckout ensures a file the scan found, swapped for a
// symbolic link to a file outside the checkout before integrate reads it, is refused rather
// than read through the link and sent: the edit here is the scan's, the swap is the attack.
func TestIntegrateReadsNothingOutsideTheCheckout(t *testing.T) {
	t.Parallel()
	co := statTestCheckout(t, map[string]string{"a.txt": "a\n"})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("the key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(co.root, "a.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(co.root, "a.txt")); err != nil {
		t.Fatal(err)
	}
	// No client: a read refused stops integrate before anything is sent.
	ws := &Workspace{Checkout: co}
	// The scan found what the link leads to: only reading without following links refuses it
	// (a read through the link would match the scanned digest and send the secret).
	scanned := Edit{Path: "a.txt", Kind: "modified", digest: repo.Digest([]byte("the key\n"))}
	_, err := ws.send(context.Background(), []Edit{scanned}, nil, "m", TaskClaim{})
	if err == nil || !strings.Contains(err.Error(), "read a.txt") || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("integrate of a file swapped for a link out of the checkout: %v, want the read refused as a link's", err)
	}
	// A link to another file of the checkout (git's configuration, say) is not read through
	// either: a link is data, never a path integrate follows.
	if err := os.MkdirAll(filepath.Join(co.root, "sub", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(co.root, "sub", ".git", "config"), []byte("[core]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(co.root, "a.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("sub", ".git", "config"), filepath.Join(co.root, "a.txt")); err != nil {
		t.Fatal(err)
	}
	scanned.digest = repo.Digest([]byte("[core]\n"))
	_, err = ws.send(context.Background(), []Edit{scanned}, nil, "m", TaskClaim{})
	if err == nil || !strings.Contains(err.Error(), "read a.txt") || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("integrate of a file swapped for a link to .git/config: %v, want the read refused as a link's", err)
	}
}
