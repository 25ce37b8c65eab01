package repoview_test

import (
	"strings"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repoview"
)

// TestPolicyFromFlags ensures the flags' values become the policy they name, that a lane is
// read whole or refused naming what is missing, and that the policy is said back in the terms
// of the flags (internal/cli's tests run the same through ag repo set-validation).
func TestPolicyFromFlags(t *testing.T) {
	f := repoview.PolicyFlags{Timeout: time.Minute, Env: []string{"A=b=c"}, Batch: 2, MaxMemory: "512MiB", Lanes: []string{"web=web/,docs/web/:npm test"}}
	v, err := f.Policy([]string{"go", "test", "./..."})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := repoview.DescribePolicy(v), "`go test ./...` (timeout 1m0s), in batches of 2, memory 512 MiB, lanes: web (web/, docs/web/) `npm test`"; got != want {
		t.Errorf("DescribePolicy = %q, want %q", got, want)
	}
	if v.GetEnv()["A"] != "b=c" {
		t.Errorf("--env A=b=c set %v", v.GetEnv())
	}
	if v, err := (&repoview.PolicyFlags{}).Policy(nil); v != nil || err != nil {
		t.Errorf("no command, no flag: %v, %v; want no policy", v, err)
	}
	if _, err := (&repoview.PolicyFlags{Depth: 2}).Policy(nil); err == nil {
		t.Error("--depth without a command was taken")
	}
	for in, want := range map[string]string{"=web/:x": "no lane name", "web=web/": "no ':'", "web=web/,:x": "an empty prefix", "web=web/:": "no command"} {
		if _, err := repoview.ParseLane(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLane(%q) = %v, want an error saying %q", in, err, want)
		}
	}
}

// TestDescribeEntries ensures a tree's entries are counted by what git calls them.
func TestDescribeEntries(t *testing.T) {
	entries := []*agwpv1.TreeEntry{{Mode: "100644"}, {Mode: "100755"}, {Mode: "120000"}, {Mode: "160000"}, {Mode: "160000"}}
	if got, want := repoview.DescribeEntries(entries), "2 files, 1 executable, 1 symbolic link, 2 submodules"; got != want {
		t.Errorf("DescribeEntries = %q, want %q", got, want)
	}
}

// TestSummarySaysWhereAShallowHistoryStarts ensures `ag repo show` of a repository imported
// from a shallow clone says where its history starts, and says nothing of it for a whole one.
func TestSummarySaysWhereAShallowHistoryStarts(t *testing.T) {
	const boundary = "0cf50fa6118cdd5f9a5fa3eb6b7210135d366a43"
	for _, shallow := range [][]string{{boundary}, nil} {
		var b strings.Builder
		s := &repoview.Summary{
			Repository: &agwpv1.GetRepositoryResponse{Repository: &agwpv1.Repository{Name: "app", Mainline: "rev_1", Shallow: shallow}},
			Tree:       &agwpv1.GetTreeResponse{},
		}
		if err := repoview.WriteSummary(&b, s); err != nil {
			t.Fatal(err)
		}
		says := strings.Contains(b.String(), "rev_1 (history from "+boundary+" on)\n")
		if says != (shallow != nil) || (shallow == nil && strings.Contains(b.String(), "history")) {
			t.Errorf("the summary of a repository shallow at %v:\n%s", shallow, b.String())
		}
	}
}
