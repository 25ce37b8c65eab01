package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSetMirror ensures `ag repo set-mirror` keeps the credential from its file out of every
// answer, refuses a URL that holds one, that `ag repo show` says where the mirror stands (a forge
// nobody answers at is failing, with why), and that --remove removes it.
func TestSetMirror(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, map[string]string{"README.md": "# app\n"})
	cred := filepath.Join(t.TempDir(), "forge.token")
	if err := os.WriteFile(cred, []byte("bot:forge-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		return runCLI(append(args, "--server", e.srv.URL, "--token", e.srv.AdminToken)...)
	}
	if _, errOut, code := run("repo", "set-mirror", "app", "http://bot:leak@127.0.0.1:1/app.git"); code == 0 || !strings.Contains(errOut, "credential apart") {
		t.Fatalf("set-mirror with a password in the URL: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := run("repo", "set-mirror", "app"); code != 2 || !strings.Contains(errOut, "--remove") {
		t.Fatalf("set-mirror without a URL: exit %d\n%s", code, errOut)
	}
	out, errOut, code := run("repo", "set-mirror", "app", "http://127.0.0.1:1/app.git", "--credential-file", cred)
	if code != 0 || !strings.Contains(out, "app mirrors to http://127.0.0.1:1/app.git (main)") || strings.Contains(out+errOut, "forge-secret") {
		t.Fatalf("set-mirror: exit %d\n%s%s", code, out, errOut)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); ; <-tick.C {
		out, _, _ = run("repo", "show", "app")
		if strings.Contains(out, "forge mirror  http://127.0.0.1:1/app.git (main): failing: read the forge's branches") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ag repo show never said the mirror fails:\n%s", out)
		}
	}
	if json, _, _ := run("repo", "show", "app", "--json"); strings.Contains(json, "forge-secret") || !strings.Contains(strings.Join(strings.Fields(json), ""), `"hasCredential":true`) {
		t.Fatalf("ag repo show --json:\n%s", json)
	}
	if out, _, code := run("repo", "set-mirror", "app", "--remove"); code != 0 || !strings.Contains(out, "app has no forge mirror now") {
		t.Fatalf("set-mirror --remove: exit %d\n%s", code, out)
	}
	if out, _, _ := run("repo", "show", "app"); strings.Contains(out, "forge mirror") {
		t.Fatalf("ag repo show after --remove:\n%s", out)
	}
}
