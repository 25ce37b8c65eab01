package checkout

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/repo"
)

// TestPlanSync ensures a sync is decided from the base revision's files, the revision's and the
// local edits alone, path by path: what is written, deleted, merged, kept, in conflict.
func TestPlanSync(t *testing.T) {
	t.Parallel()
	file := func(d string) treeFile { return treeFile{digest: "sha256:" + d, Mode: repo.ModeFile} }
	exe := func(d string) treeFile { return treeFile{digest: "sha256:" + d, Mode: repo.ModeExecutable} }
	link := func(d string) treeFile { return treeFile{digest: "sha256:" + d, Mode: repo.ModeSymlink} }
	sub := treeFile{Mode: repo.ModeGitlink, commit: strings.Repeat("a", 40)}
	modified := func(d, mode string) Edit { return Edit{Kind: "modified", digest: "sha256:" + d, Mode: mode} }
	deleted := Edit{Kind: "deleted"}

	type plan struct {
		writes, deletes, submoduleDirs []string
		merges                         []plannedMerge
		updated, deleted, kept         []string
		conflicts                      []string
		drop                           []string
		restored                       []string
	}
	for _, c := range []struct {
		name         string
		base, target treeFile // a zero treeFile: no such file
		edit         *Edit
		conflict     bool // a conflict record from an earlier sync --merge
		ours, theirs bool
		want         plan
	}{
		{name: "unchanged, not edited", base: file("x"), target: file("x")},
		{name: "unchanged, edited: the edit stays", base: file("x"), target: file("x"), edit: &Edit{Kind: "modified", digest: "sha256:l", Mode: repo.ModeFile}},
		{name: "changed upstream", base: file("x"), target: file("y"),
			want: plan{writes: []string{"f"}, updated: []string{"f"}}},
		{name: "added upstream", target: file("y"),
			want: plan{writes: []string{"f"}, updated: []string{"f"}}},
		{name: "deleted upstream", base: file("x"),
			want: plan{deletes: []string{"f"}, deleted: []string{"f"}}},
		{name: "edited to what upstream has", base: file("x"), target: file("y"), edit: ptr(modified("y", repo.ModeFile)),
			want: plan{updated: []string{"f"}}},
		{name: "deleted on both sides", base: file("x"), edit: &deleted},
		{name: "both changed: merged", base: file("x"), target: file("y"), edit: ptr(modified("l", repo.ModeFile)),
			want: plan{merges: []plannedMerge{{"f", repo.ModeFile}}}},
		{name: "both changed, the mode upstream", base: file("x"), target: exe("y"), edit: ptr(modified("l", repo.ModeFile)),
			want: plan{merges: []plannedMerge{{"f", repo.ModeExecutable}}}},
		{name: "added on both sides, modes apart", target: exe("y"), edit: &Edit{Kind: "added", digest: "sha256:l", Mode: repo.ModeFile},
			want: plan{conflicts: []string{"f: the mode changed on both sides: 100644 here, 100755 in the mainline"}}},
		{name: "a link here, a file upstream", base: file("x"), target: file("y"), edit: ptr(modified("l", repo.ModeSymlink)),
			want: plan{conflicts: []string{"f: a symbolic link here, a file in the mainline"}}},
		{name: "links", base: link("x"), target: link("y"), edit: ptr(modified("l", repo.ModeSymlink)),
			want: plan{conflicts: []string{"f: a symbolic link changed on both sides"}}},
		{name: "deleted locally, changed upstream", base: file("x"), target: file("y"), edit: &deleted,
			want: plan{conflicts: []string{"f: deleted locally, changed in the mainline"}}},
		{name: "changed locally, deleted upstream", base: file("x"), edit: ptr(modified("l", repo.ModeFile)),
			want: plan{conflicts: []string{"f: changed locally, deleted in the mainline"}}},
		{name: "changed locally, a submodule upstream", base: file("x"), target: sub, edit: ptr(modified("l", repo.ModeFile)),
			want: plan{conflicts: []string{"f: changed locally, a submodule in the mainline"}}},
		{name: "a submodule upstream", base: file("x"), target: sub,
			want: plan{deletes: []string{"f"}, submoduleDirs: []string{"f"}, updated: []string{"f"}}},
		{name: "--theirs", base: file("x"), target: file("y"), edit: ptr(modified("l", repo.ModeFile)), theirs: true,
			want: plan{writes: []string{"f"}, updated: []string{"f"}, drop: []string{"f"}}},
		{name: "--theirs, deleted upstream", base: file("x"), edit: ptr(modified("l", repo.ModeFile)), theirs: true,
			want: plan{deletes: []string{"f"}, deleted: []string{"f"}, drop: []string{"f"}}},
		{name: "--ours", base: file("x"), target: file("y"), edit: ptr(modified("l", repo.ModeFile)), ours: true,
			want: plan{kept: []string{"f"}, drop: []string{"f"}}},
		{name: "--ours on markers", base: file("x"), target: file("x"), edit: ptr(modified("m", repo.ModeFile)), conflict: true, ours: true,
			want: plan{writes: []string{"f"}, kept: []string{"f"}, drop: []string{"f"}, restored: []string{"f"}}},
		{name: "markers reverted", base: file("x"), target: file("x"), conflict: true,
			want: plan{drop: []string{"f"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base, target := map[string]treeFile{}, map[string]treeFile{}
			if c.base != (treeFile{}) {
				base["f"] = c.base
			}
			if c.target != (treeFile{}) {
				target["f"] = c.target
			}
			var edits []Edit
			if c.edit != nil {
				e := *c.edit
				e.Path = "f"
				edits = append(edits, e)
			}
			records := map[string]conflictRecord{}
			if c.conflict {
				records["f"] = conflictRecord{Ours: "sha256:o"}
			}
			var opts SyncOptions
			if c.ours {
				opts.Ours = []string{"f"}
			}
			if c.theirs {
				opts.Theirs = []string{"f"}
			}
			p := planSync(base, target, edits, records, opts)
			got := plan{writes: p.writes, deletes: p.deletes, submoduleDirs: p.submoduleDirs, merges: p.merges,
				updated: p.updated, deleted: p.deleted, kept: p.keptEdits, drop: sortedKeys(p.drop)}
			for _, sc := range p.conflicts {
				got.conflicts = append(got.conflicts, sc.Path+": "+sc.Reason)
			}
			for path := range p.kept {
				got.restored = append(got.restored, path)
			}
			if len(got.drop) == 0 {
				got.drop = nil
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("planSync:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
