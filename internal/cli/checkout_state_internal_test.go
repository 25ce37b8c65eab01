package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		if err := os.MkdirAll(filepath.Join(root, stateDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(statePath(root), []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := findCheckout(root)
		if err == nil || !strings.Contains(err.Error(), "is damaged") || !strings.Contains(err.Error(), "run `ag checkout` again") {
			t.Errorf("%s: findCheckout = %v, want it refused as damaged, saying what to do", name, err)
		}
	}

	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, stateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	good := `{"repository":"app","files":{"a/x.txt":"` + digest + `"},"conflicts":{"a/x.txt":{"ours":"` + digest + `"}},"leases":[{"id":"l1","token":1,"paths":["a/"]}]}`
	if err := os.WriteFile(statePath(root), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := findCheckout(root); err != nil {
		t.Errorf("a state ag wrote: %v", err)
	}
}
