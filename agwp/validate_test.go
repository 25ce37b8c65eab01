package agwp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/agwp"
)

const (
	treeDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	gitTree    = "89abcdef0123456789abcdef0123456789abcdef"
)

// payloadJSON answers a valid payload's JSON with edit applied to its members.
func payloadJSON(t *testing.T, edit func(map[string]any)) []byte {
	t.Helper()
	p := map[string]any{
		"repository": "app", "change": "chg_1", "candidate_revision": "rev_1",
		"tree_digest": treeDigest, "git_tree": gitTree,
		"command": []any{"go", "test", "./..."}, "timeout": "10m0s",
	}
	edit(p)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseValidatePayloadNamesTheTree ensures a payload names its tree by its git tree id, its
// tree digest, or both, and that each is read as written.
func TestParseValidatePayloadNamesTheTree(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		edit              func(map[string]any)
		wantTree, wantGit string
	}{
		"both":                  {func(map[string]any) {}, treeDigest, gitTree},
		"the git tree alone":    {func(p map[string]any) { delete(p, "tree_digest") }, "", gitTree},
		"an empty tree digest":  {func(p map[string]any) { p["tree_digest"] = "" }, "", gitTree},
		"the tree digest alone": {func(p map[string]any) { delete(p, "git_tree") }, treeDigest, ""}, // jobs enqueued before
	} {
		p, err := agwp.ParseValidatePayloadJSON(payloadJSON(t, c.edit))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if p.TreeDigest != c.wantTree || p.GitTree != c.wantGit {
			t.Errorf("%s: tree digest %q, git tree %q; want %q, %q", name, p.TreeDigest, p.GitTree, c.wantTree, c.wantGit)
		}
	}
}

// TestParseValidatePayloadRefuses ensures a payload without a tree, or with one in another
// form, or without what a worker needs, is refused, naming the field.
func TestParseValidatePayloadRefuses(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		edit  func(map[string]any)
		field string
	}{
		"no tree":                {func(p map[string]any) { delete(p, "tree_digest"); delete(p, "git_tree") }, "git_tree or tree_digest"},
		"empty trees":            {func(p map[string]any) { p["tree_digest"], p["git_tree"] = "", "" }, "git_tree or tree_digest"},
		"uppercase git tree":     {func(p map[string]any) { p["git_tree"] = strings.ToUpper(gitTree) }, "git_tree"},
		"short git tree":         {func(p map[string]any) { p["git_tree"] = gitTree[:39] }, "git_tree"},
		"sha256-long git tree":   {func(p map[string]any) { p["git_tree"] = strings.TrimPrefix(treeDigest, "sha256:") }, "git_tree"},
		"prefixed git tree":      {func(p map[string]any) { p["git_tree"] = "sha1:" + gitTree }, "git_tree"},
		"unprefixed tree digest": {func(p map[string]any) { p["tree_digest"] = strings.TrimPrefix(treeDigest, "sha256:") }, "tree_digest"},
		"uppercase tree digest":  {func(p map[string]any) { p["tree_digest"] = strings.ToUpper(treeDigest) }, "tree_digest"},
		"no repository":          {func(p map[string]any) { delete(p, "repository") }, "repository"},
		"no candidate":           {func(p map[string]any) { delete(p, "candidate_revision") }, "candidate_revision"},
		"no command":             {func(p map[string]any) { p["command"] = []any{} }, "command"},
		"a bad timeout":          {func(p map[string]any) { p["timeout"] = "soon" }, "timeout"},
	} {
		_, err := agwp.ParseValidatePayloadJSON(payloadJSON(t, c.edit))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err = %v, want a refusal naming %s", name, err, c.field)
		}
	}
}

// TestValidatePayloadRoundTrips ensures the JSON the gate writes reads back through the
// protobuf Struct a worker receives, and leaves out the tree it does not name.
func TestValidatePayloadRoundTrips(t *testing.T) {
	t.Parallel()
	want := agwp.ValidatePayload{
		Repository: "app", Change: "chg_1", CandidateRevision: "rev_1", GitTree: gitTree,
		Command: []string{"make", "check"}, Timeout: "1m0s", Env: map[string]string{"CI": "1"},
	}
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "tree_digest") {
		t.Errorf("a payload without a tree digest names one: %s", data)
	}
	s := &structpb.Struct{}
	if err := s.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	got, err := agwp.ParseValidatePayload(s)
	if err != nil {
		t.Fatalf("ParseValidatePayload: %v", err)
	}
	if got.GitTree != want.GitTree || got.TreeDigest != "" || got.Repository != want.Repository || got.Env["CI"] != "1" {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
