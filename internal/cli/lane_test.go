package cli_test

import (
	"slices"
	"strings"
	"testing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/cli"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestLaneFlag ensures --lane of `ag repo create` and `ag repo set-validation` sets a policy's
// lanes, shown back by the command and by `ag repo show`, that a malformed value is refused
// before the server is asked, with the usage exit code and what to write instead, and that a
// lane the server refuses is named by its field.
func TestLaneFlag(t *testing.T) {
	t.Parallel()
	srv := agtest.Start(t, agtest.Options{})
	conn := []string{"--server", srv.URL, "--token", srv.AdminToken}
	// The connection flags go before --, after which the arguments are the command's.
	run := func(args ...string) (string, string, int) {
		at := slices.Index(args, "--")
		if at < 0 {
			at = len(args)
		}
		return runCLI(slices.Concat(args[:at], conn, args[at:])...)
	}

	out, errOut, code := run("repo", "create", "app", "--lane", "web=web/,docs/web/:npm test", "--lane", "api=api/:go test  ./api/...",
		"--", "go", "test", "./...")
	want := "validation: `go test ./...` (timeout 10m0s), lanes: web (web/, docs/web/) `npm test`; api (api/) `go test ./api/...`\n"
	if code != 0 || !strings.HasSuffix(out, want) {
		t.Fatalf("ag repo create with two lanes: exit %d, stdout %q, stderr %q; want it to end with %q", code, out, errOut, want)
	}
	if out, errOut, code = run("repo", "show", "app"); code != 0 || !strings.Contains(out, "lanes: web (web/, docs/web/) `npm test`; api (api/) `go test ./api/...`") {
		t.Fatalf("ag repo show: exit %d, stdout %q, stderr %q; want the lanes", code, out, errOut)
	}

	out, errOut, code = run("repo", "set-validation", "app", "--timeout", "5m", "--env", "CI=1", "--lane", "web=web/:npm run test -- --ci", "--", "make", "check")
	want = "repository app: validation `make check` (timeout 5m0s), lanes: web (web/) `npm run test -- --ci`\n"
	if code != 0 || out != want {
		t.Fatalf("ag repo set-validation with a lane: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	r, err := srv.Admin.Repos.GetRepository(t.Context(), &agwpv1.GetRepositoryRequest{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	l := r.GetRepository().GetValidation().GetLanes()
	if len(l) != 1 || strings.Join(l[0].GetCommand(), "|") != "npm|run|test|--|--ci" || l[0].GetEnv()["CI"] != "1" ||
		l[0].GetTimeout().AsDuration().String() != "5m0s" {
		t.Fatalf("the policy set holds lanes %v, want web running npm run test -- --ci with the policy's env and timeout", l)
	}

	// Malformed values: refused on the command line, the policy in force untouched.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"repo", "set-validation", "app", "--lane", "web", "--", "true"}, `--lane "web": no lane name before '='`},
		{[]string{"repo", "set-validation", "app", "--lane", "=web/:npm test", "--", "true"}, `--lane "=web/:npm test": no lane name before '='`},
		{[]string{"repo", "set-validation", "app", "--lane", "web=web/ npm test", "--", "true"}, `--lane "web=web/ npm test": no ':' between the prefixes and the command`},
		{[]string{"repo", "set-validation", "app", "--lane", "web=web/:", "--", "true"}, `--lane "web=web/:": no command after ':'`},
		{[]string{"repo", "set-validation", "app", "--lane", "web=web/:   ", "--", "true"}, `no command after ':'`},
		{[]string{"repo", "set-validation", "app", "--lane", "web=web/,,docs/:npm test", "--", "true"}, `--lane "web=web/,,docs/:npm test": an empty prefix`},
		{[]string{"repo", "set-validation", "app", "--lane", "web=:npm test", "--", "true"}, `an empty prefix`},
		{[]string{"repo", "create", "other", "--lane", "web=web/:npm test"}, "--lane belong to a validation command: name it after --"},
		{[]string{"repo", "set-validation", "app", "--none", "--lane", "web=web/:npm test"}, "--none takes no command, and none of"},
	} {
		out, errOut, code := run(c.args...)
		if code != cli.ExitUsage || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("ag %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
		if c.want == "no command after ':'" && !strings.Contains(errOut, "use NAME=PREFIX[,PREFIX...]:COMMAND ARGS...") {
			t.Errorf("ag %s: stderr %q does not say how to write a lane", strings.Join(c.args, " "), errOut)
		}
	}

	// Well formed, refused by the server: the message names the lane's field.
	for _, c := range []struct {
		lanes []string
		want  string
	}{
		{[]string{"web=web/:npm test", "ui=web/app/:npm test"}, `validation.lanes[1].prefixes: "web/app/" of lane ui overlaps "web/" of lane web`},
		{[]string{"Web=web/:npm test"}, `validation.lanes[0].name: "Web" is not a lane name`},
		{[]string{"web=../web/:npm test"}, `validation.lanes[0].prefixes[0]: "../web/" has a ".." segment`},
	} {
		args := []string{"repo", "set-validation", "app"}
		for _, l := range c.lanes {
			args = append(args, "--lane", l)
		}
		out, errOut, code := run(append(args, "--", "true")...)
		if code != cli.ExitUsage || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("ag %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, out, errOut, c.want)
		}
	}
	if out, _, _ = run("repo", "show", "app"); !strings.Contains(out, "`make check` (timeout 5m0s), lanes: web (web/) `npm run test -- --ci`") {
		t.Errorf("after refusals, ag repo show says %q; want the policy set before", out)
	}
}
