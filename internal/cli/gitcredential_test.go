package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitRunsAgAsItsCredentialHelper ensures git itself, configured with
// `credential.helper '!ag git-credential'` or, with git-credential-ag on PATH, with
// `credential.helper ag`, gets the token for the ag server's URLs and nothing for another
// host, and that approving and rejecting a credential (store, erase) print nothing.
func TestGitRunsAgAsItsCredentialHelper(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	const token = "agt_token-for-git"
	bin := t.TempDir()
	if err := os.Symlink(os.Args[0], filepath.Join(bin, "git-credential-ag")); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := []string{
		"HOME=" + home, "XDG_CONFIG_HOME=" + home, "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "LC_ALL=C",
		runAsAg + "=1", "AG_SERVER=https://ag.example:8443", "AG_TOKEN=" + token,
	}
	git := func(helper, stdin string, args ...string) (string, string, error) {
		cmd := exec.Command("git", append([]string{"-c", "credential.helper=" + helper}, args...)...)
		cmd.Env = env
		cmd.Dir = home
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	for _, helper := range []string{"!'" + os.Args[0] + "' git-credential", "ag"} {
		out, errOut, err := git(helper, "protocol=https\nhost=ag.example:8443\npath=git/app.git\n\n", "credential", "fill")
		if err != nil || !strings.Contains(out, "\nusername=ag\n") || !strings.Contains(out, "\npassword="+token+"\n") {
			t.Errorf("helper %q, git credential fill for the server: %v\n%s%s", helper, err, out, errOut)
		}
		out, errOut, err = git(helper, "protocol=https\nhost=github.com\n\n", "credential", "fill")
		if err == nil || strings.Contains(out+errOut, token) || !strings.Contains(errOut, "could not read Username") {
			t.Errorf("helper %q, git credential fill for another host: %v, want git to find no credential:\n%s%s", helper, err, out, errOut)
		}
		for _, action := range []string{"approve", "reject"} {
			out, errOut, err := git(helper, "protocol=https\nhost=ag.example:8443\nusername=ag\npassword="+token+"\n\n", "credential", action)
			if err != nil || out != "" || errOut != "" {
				t.Errorf("helper %q, git credential %s: %v, printed %q %q; want nothing", helper, action, err, out, errOut)
			}
		}
	}
}
