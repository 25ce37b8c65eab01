package cli_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestSetValidationClosedRunFlags ensures --network, --isolation and the --max-* limits of
// `ag repo set-validation` set the policy, are said back as set, and that a size that does not
// parse is refused before the server is asked, with the usage exit code.
func TestSetValidationClosedRunFlags(t *testing.T) {
	t.Parallel()
	run := adminWithRepo(t)
	out, errOut, code := run("repo", "set-validation", "app", "--network", "egress", "--isolation", "none",
		"--max-memory", "512MiB", "--max-pids", "256", "--max-disk", "2G", "--", "go", "test", "./...")
	want := "repository app: validation `go test ./...` (timeout 10m0s), network egress, any run accepted (no sandbox required), memory 512 MiB, 256 processes, disk 2 GiB\n"
	if code != 0 || out != want {
		t.Fatalf("ag repo set-validation: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	out, errOut, code = run("repo", "set-validation", "app", "--max-memory", "lots", "--", "true")
	if code != 2 || !strings.Contains(errOut, `--max-memory: size "lots": a number of bytes, or with a unit`) {
		t.Errorf("ag repo set-validation --max-memory lots: exit %d, stdout %q, stderr %q; want exit 2 naming the flag", code, out, errOut)
	}
	out, errOut, code = run("repo", "set-validation", "app", "--network", "shared", "--", "true")
	if code == 0 || !strings.Contains(errOut, `validation.network: "shared" is none of "none" (the default) and "egress"`) {
		t.Errorf("ag repo set-validation --network shared: exit %d, stdout %q, stderr %q; want the server's refusal", code, out, errOut)
	}
}

// TestSetValidationPresetAndProtect ensures --preset needs no command (the preset's is taken),
// --protect paths are said back, and a preset or a path the server does not take is refused
// naming the field.
func TestSetValidationPresetAndProtect(t *testing.T) {
	t.Parallel()
	run := adminWithRepo(t)
	out, errOut, code := run("repo", "set-validation", "app", "--preset", "go", "--protect", "go.sum", "--protect", "ci/")
	want := "repository app: validation `go test ./...` (timeout 10m0s), preset go, protecting ci/, go.sum\n"
	if code != 0 || out != want {
		t.Fatalf("ag repo set-validation --preset go: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	out, errOut, code = run("repo", "set-validation", "app", "--preset", "cobol")
	if code != 2 || !strings.Contains(errOut, `validation.preset: "cobol" is not a preset this server knows ("go", "node" or "python")`) {
		t.Errorf("ag repo set-validation --preset cobol: exit %d, stdout %q, stderr %q; want exit 2 naming the preset", code, out, errOut)
	}
	out, errOut, code = run("repo", "set-validation", "app", "--protect", "../x", "--", "true")
	if code != 2 || !strings.Contains(errOut, `validation.protect[0]`) {
		t.Errorf("ag repo set-validation --protect ../x: exit %d, stdout %q, stderr %q; want exit 2 naming protect[0]", code, out, errOut)
	}
}

// adminWithRepo starts a server with the repository app and answers a function that runs the
// command line as its admin (the connection flags before any --).
func adminWithRepo(t *testing.T) func(args ...string) (string, string, int) {
	t.Helper()
	srv := agtest.Start(t, agtest.Options{})
	conn := []string{"--server", srv.URL, "--token", srv.AdminToken}
	run := func(args ...string) (string, string, int) {
		at := slices.Index(args, "--")
		if at < 0 {
			at = len(args)
		}
		return runCLI(slices.Concat(args[:at], conn, args[at:])...)
	}
	if out, errOut, code := run("repo", "create", "app"); code != 0 {
		t.Fatalf("ag repo create: exit %d\n%s%s", code, out, errOut)
	}
	return run
}
