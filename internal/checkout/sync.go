package checkout

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/repo"
)

// SyncOptions say how a sync treats the local edits of files the mainline changed too.
type SyncOptions struct {
	revision string   // the revision to sync to; "" = the mainline
	Merge    bool     // write text conflicts into the files, between markers, and go ahead
	Theirs   []string // repository paths ("a/" for a directory) to take from the revision, local edits dropped
	Ours     []string // repository paths whose local edits stay, as edits on the new revision
	// progress answers the progress line of fetching files of bytes, or nil for none.
	Progress func(files int, bytes int64) *Progress
}

// BothSides answers the first path of Theirs that Ours names too (itself, or a directory
// around it), "" when none: a path cannot be taken from the mainline and kept as it is at once,
// and the caller refuses that before a sync begins.
func (o *SyncOptions) BothSides() string {
	for _, p := range o.Theirs {
		if UnderAny(p, o.Ours) || UnderAny(strings.TrimSuffix(p, "/"), o.Ours) {
			return p
		}
	}
	return ""
}

// SyncResult is what a sync did, or would have done when refused; `ag sync --json` prints it.
type SyncResult struct {
	From      string         `json:"from"`      // the revision the checkout was at
	To        string         `json:"to"`        // the revision synced to
	Applied   bool           `json:"applied"`   // false: refused, nothing was changed
	Updated   []string       `json:"updated"`   // files written from the revision
	Deleted   []string       `json:"deleted"`   // files removed as the revision removed them
	Merged    []string       `json:"merged"`    // merged cleanly with a local edit: still local edits, now on the new revision
	Kept      []string       `json:"kept"`      // local edits kept over the revision's change (--ours)
	Conflicts []SyncConflict `json:"conflicts"` // files the revision and a local edit both changed, unmerged
	Blocked   []string       `json:"blocked"`   // what stands where the revision has a file, not ag's to remove
}

// SyncConflict is a file both the revision and a local edit changed, which did not merge.
type SyncConflict struct {
	Path    string `json:"path"`
	Reason  string `json:"reason"`
	Markers bool   `json:"markers"` // written into the file between conflict markers (--merge)
}

func newSyncResult(from, to string) *SyncResult {
	return &SyncResult{From: from, To: to, Updated: []string{}, Deleted: []string{}, Merged: []string{}, Kept: []string{},
		Conflicts: []SyncConflict{}, Blocked: []string{}}
}

// SyncTo brings the checkout to revision (the mainline when empty) without losing local
// edits: a file the revision and a local edit both changed is merged when both are text and the
// changes do not overlap, and the sync is refused otherwise. Refused, it has changed nothing. It
// answers how many files it took from the revision.
func SyncTo(ctx context.Context, ws *Workspace, revision string) (int, error) {
	res, err := Sync(ctx, ws, SyncOptions{revision: revision})
	if res == nil || !res.Applied {
		return 0, err
	}
	return len(res.Updated) + len(res.Deleted), err
}

// Sync brings the checkout to a revision as opts say. Local edits of files the revision
// did not change stay. For a file both changed: a local edit equal to the revision's is taken;
// paths in opts.theirs take the revision's version and paths in opts.ours keep the local one;
// two texts are merged three ways, and a merge with conflicts is written between markers with
// opts.merge (answering an error with the conflict exit code) and refused without; anything
// else (a deletion on one side, a binary file) is refused. A refused sync has changed nothing and
// answers its result with Applied false. The checkout's own files are written through os.Root.
//
// The steps: planSync decides from the files alone; what needs contents (the local content kept
// for --ours, the three-way merges) or the disk (folded names, what stands in the way) is
// checked around it; every blob is fetched; only then does applySync change the checkout.
func Sync(ctx context.Context, ws *Workspace, opts SyncOptions) (*SyncResult, error) {
	since := ws.Checkout.BaseRevision
	tree, err := ws.Client.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: ws.Checkout.Repository, Revision: opts.revision, Since: since})
	if connect.CodeOf(err) == connect.CodeNotFound && since != "" {
		// The base is not the server's (a repository made anew under the same name): the
		// whole tree, as before there was since.
		since = ""
		tree, err = ws.Client.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: ws.Checkout.Repository, Revision: opts.revision})
	}
	if err != nil {
		return nil, err
	}
	if got := tree.GetSince(); got != "" && got != since {
		return nil, fmt.Errorf("refused the server's tree: asked for its difference from %s, it answered one from %s. Nothing was written", since, got)
	}
	var diff *difference
	if tree.GetSince() != "" {
		if diff, err = readDifference(tree); err != nil {
			return nil, err
		}
	}
	var edits []Edit
	if diff != nil && !watched(ws.Checkout.root) {
		// Only the paths the plan is over: without a watcher, a scan of every file would be
		// most of the cost of a sync that brings a few.
		edits, err = ws.Checkout.localEditsOf(diff.paths(ws.Checkout.Conflicts))
	} else {
		edits, err = ws.Checkout.LocalEdits()
	}
	if err != nil {
		return nil, err
	}
	if diff != nil && ws.Checkout.BaseRevision != since {
		// Another ag moved the checkout while this one asked: the difference is from a base
		// the index no longer holds.
		return nil, fmt.Errorf("another ag moved this checkout from %s to %s meanwhile; nothing was changed: run `ag sync` again", since, ws.Checkout.BaseRevision)
	}
	root, err := os.OpenRoot(ws.Checkout.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	reader, err := newCheckoutReader(root)
	if err != nil {
		return nil, err
	}
	defer reader.close()

	res := newSyncResult(ws.Checkout.BaseRevision, tree.GetRevision())
	var baseFiles, target map[string]treeFile
	if diff == nil {
		if target, err = TreeFiles(tree.GetEntries()); err != nil {
			return nil, err
		}
		if baseFiles, err = ws.Checkout.BaseFiles(); err != nil {
			return nil, err
		}
		// The mainline may have brought a second spelling of a name this file system takes for
		// one (Readme.md beside README.md): writing it would write over the first.
		if err := refuseFoldedNames(root, target); err != nil {
			return res, fmt.Errorf("nothing was changed: %w", err)
		}
	} else if baseFiles, target, err = ws.Checkout.filesSince(root, diff, edits); err != nil {
		if fold := (*foldError)(nil); errors.As(err, &fold) {
			return res, fmt.Errorf("nothing was changed: %w", fold.error)
		}
		return nil, err
	}
	plan := planSync(baseFiles, target, edits, ws.Checkout.Conflicts, opts)
	plan.whole = diff == nil
	if err := plan.readKept(root); err != nil {
		return nil, err
	}
	if err := plan.mergeTexts(ctx, ws.Client, reader, opts.Merge); err != nil {
		return nil, err
	}
	plan.report(res)
	if refused := unmarked(res.Conflicts); len(refused) > 0 {
		return res, &ConflictError{refusal(refused)}
	}
	plan.sortChanges()
	blocked, err := inTheWay(root, plan.writes, plan.submoduleDirs, plan.deleting())
	if err != nil {
		return nil, err
	}
	if len(blocked) > 0 {
		res.Blocked = blocked
		return res, &ConflictError{fmt.Errorf("the mainline has files or directories where your checkout has something ag did not write; nothing was changed. Move these aside first: %s", strings.Join(blocked, ", "))}
	}
	if err := plan.fetchWrites(ctx, ws.Client, tree.GetEntries(), opts.Progress); err != nil {
		return nil, err
	}
	if err := applySync(root, ws.Checkout, plan, tree.GetRevision()); err != nil {
		return nil, err
	}
	res.Applied = true
	if len(res.Conflicts) > 0 {
		paths := make([]string, 0, len(res.Conflicts))
		for _, c := range res.Conflicts {
			paths = append(paths, c.Path)
		}
		return res, &ConflictError{fmt.Errorf("synced to %s, with conflicts written between <<<<<<< ours and >>>>>>> theirs markers in: %s. Edit them (or take one side: ag sync --ours PATH, ag sync --theirs PATH), then integrate",
			res.To, strings.Join(paths, ", "))}
	}
	return res, nil
}

// fetchWrites fetches every blob the plan writes and does not know yet before the first change
// on disk, so a failing server leaves the checkout as it was; by several requests at once, each
// blob once.
func (p *syncPlan) fetchWrites(ctx context.Context, c *client.Client, entries []*agwpv1.TreeEntry, progress func(int, int64) *Progress) error {
	need := map[string]string{}
	for _, w := range p.writes {
		if _, known := p.contents[w]; !known {
			need[w] = p.target[w].digest
		}
	}
	var prog *Progress
	if progress != nil && len(need) > 0 {
		var size int64
		for _, e := range entries {
			if _, ok := need[e.GetPath()]; ok {
				size += int64(e.GetSize())
			}
		}
		prog = progress(len(need), size)
	}
	fetched, err := fetchContents(ctx, c, need, BlobSizes(entries), prog)
	prog.Done()
	if err != nil {
		return err
	}
	maps.Copy(p.contents, fetched)
	return nil
}

// applySync changes the checkout as the plan says, every content in hand, and moves its base to
// revision.
func applySync(root *os.Root, c *Checkout, p *syncPlan, revision string) error {
	// The local contents of files about to get conflict markers, kept for --ours.
	for path, content := range p.oursContent {
		if err := writeFile(root, oursPath(p.newConflicts[path].Ours), content); err != nil {
			return err
		}
	}
	// Deletes first: a file the mainline turned into a directory must go before what is written
	// under it, and the files of a directory it turned into a file before that file.
	for _, path := range p.deletes {
		var err error
		if p.base[path].Gitlink() {
			err = removeSubmoduleDir(root, path)
		} else {
			err = removeFile(root, path)
		}
		if err != nil {
			return err
		}
	}
	for _, path := range p.writes {
		if info, err := lstatThroughDirs(root, path); err != nil {
			return err
		} else if info != nil && info.IsDir() {
			// Emptied by the deletes above (inTheWay made sure), but for directories that never
			// held a file.
			if err := removeEmptyDirs(root, path); err != nil {
				return err
			}
		}
		if err := writeEntry(root, path, p.contents[path], p.modes[path]); err != nil {
			return err
		}
	}
	for _, path := range p.submoduleDirs {
		if err := makeSubmoduleDir(root, path); err != nil {
			return err
		}
	}
	if p.whole {
		c.SetBase(revision, p.target)
	} else if err := c.moveBase(root, revision, p.base, p.target); err != nil {
		return err
	}
	for path := range p.drop {
		if rec, ok := c.Conflicts[path]; ok {
			delete(c.Conflicts, path)
			if !stillKept(c.Conflicts, p.newConflicts, rec.Ours) {
				_ = removeFile(root, oursPath(rec.Ours))
			}
		}
	}
	for path, rec := range p.newConflicts {
		if c.Conflicts == nil {
			c.Conflicts = map[string]conflictRecord{}
		}
		c.Conflicts[path] = rec
	}
	return c.saveIn(root)
}

// unmergeable answers why a path that both the mainline (want) and a local edit (of mode
// ours) changed cannot be merged, or "": a symbolic link on either side or in the base, whose
// target is no text to merge, or a submodule in the mainline.
func unmergeable(base treeFile, inBase bool, ours string, want treeFile) string {
	switch {
	case want.Gitlink():
		return "changed locally, a submodule in the mainline"
	case ours == repo.ModeSymlink && want.Mode == repo.ModeSymlink:
		return "a symbolic link changed on both sides"
	case ours == repo.ModeSymlink:
		return "a symbolic link here, a file in the mainline"
	case want.Mode == repo.ModeSymlink:
		return "a file here, a symbolic link in the mainline"
	case inBase && base.Mode == repo.ModeSymlink:
		return "a symbolic link made a file on both sides"
	}
	return ""
}

// mergeModes merges the modes of a file both sides changed, as git does: a side that kept the
// base's mode takes the other's; two different changes do not merge. A path new on both sides
// has no base ("").
func mergeModes(base, ours, theirs string) (string, bool) {
	switch {
	case ours == theirs, theirs == base:
		return ours, true
	case ours == base:
		return theirs, true
	}
	return "", false
}

// stillKept reports whether a kept local content is still needed by a conflict record.
func stillKept(records, added map[string]conflictRecord, digest string) bool {
	for _, m := range []map[string]conflictRecord{records, added} {
		for _, r := range m {
			if r.Ours == digest {
				return true
			}
		}
	}
	return false
}

// unmarked answers the conflicts that were not written into their files.
func unmarked(conflicts []SyncConflict) []SyncConflict {
	var out []SyncConflict
	for _, c := range conflicts {
		if !c.Markers {
			out = append(out, c)
		}
	}
	return out
}

// refusal explains a sync refused for conflicts, and the ways out.
func refusal(conflicts []SyncConflict) error {
	var list []string
	text := false
	for _, c := range conflicts {
		list = append(list, c.Path+" ("+c.Reason+")")
		text = text || strings.HasSuffix(c.Reason, "conflicting changes")
	}
	ways := "take the mainline's version with ag sync --theirs PATH, keep yours with ag sync --ours PATH, or ag revert PATH"
	if text {
		ways = "write the conflicts into the files with ag sync --merge, " + ways
	}
	return fmt.Errorf("the mainline changed files you edited locally and they do not merge; nothing was changed: %s. To go on: %s",
		strings.Join(list, ", "), ways)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Diff answers the checkout's local edits (all, or those under sel) as unified diffs
// against the base revision.
func Diff(ctx context.Context, ws *Workspace, sel []string) (DiffJSON, error) {
	out := DiffJSON{BaseRevision: ws.Checkout.BaseRevision, Files: []DiffFileJSON{}}
	edits, err := ws.Checkout.LocalEdits()
	if err != nil {
		return out, err
	}
	if sel != nil {
		edits = EditsUnder(edits, sel)
	}
	conflicted, err := ws.Checkout.Conflicted(edits)
	if err != nil {
		return out, err
	}
	reader, err := openCheckoutReader(ws.Checkout.root)
	if err != nil {
		return out, err
	}
	defer reader.close()
	for _, e := range edits {
		var before, after []byte
		if e.Kind != "added" {
			if before, err = ws.Client.Blob(ctx, e.base); err != nil {
				return out, fmt.Errorf("fetch the base of %s: %w", e.Path, err)
			}
		}
		if e.Kind != "deleted" {
			if after, err = reader.readEntry(e.Path, e.Mode); err != nil {
				return out, err
			}
		}
		out.Files = append(out.Files, DiffFileJSON{
			Path: e.Path, Status: e.Kind, Conflict: conflicted[e.Path], Binary: isBinary(before) || isBinary(after),
			Mode: e.Mode, BaseMode: e.BaseMode, Diff: editDiff(e, before, after),
		})
	}
	return out, nil
}

// editDiff answers an edit's diff as git prints it: a plain file's as diff -u does, and, when
// a side is executable or a link, after a "diff --git" line with the modes (old mode, new
// mode; new file mode; deleted file mode). A link's content is its target, with no newline
// at its end. A file made a link, or a link made a file, is the one deleted and the other
// added, as git shows it.
func editDiff(e Edit, before, after []byte) string {
	if e.Kind == "modified" && (e.Mode == repo.ModeSymlink) != (e.BaseMode == repo.ModeSymlink) {
		return editDiff(Edit{Path: e.Path, Kind: "deleted", BaseMode: e.BaseMode}, before, nil) +
			editDiff(Edit{Path: e.Path, Kind: "added", Mode: e.Mode}, nil, after)
	}
	aName, bName := "a/"+e.Path, "b/"+e.Path
	var modes string
	switch e.Kind {
	case "added":
		aName = "/dev/null"
		if e.Mode != repo.ModeFile {
			modes = "new file mode " + e.Mode + "\n"
		}
	case "deleted":
		bName = "/dev/null"
		if e.BaseMode != repo.ModeFile {
			modes = "deleted file mode " + e.BaseMode + "\n"
		}
	default:
		if e.Mode != e.BaseMode {
			modes = "old mode " + e.BaseMode + "\nnew mode " + e.Mode + "\n"
		}
	}
	d := unifiedDiff(aName, bName, before, after)
	if e.Kind != "modified" && len(before)+len(after) == 0 {
		d = fmt.Sprintf("--- %s\n+++ %s\n", aName, bName) // an empty file added or deleted
	}
	if e.Mode != "" && e.Mode != repo.ModeFile || e.BaseMode != "" && e.BaseMode != repo.ModeFile {
		return fmt.Sprintf("diff --git a/%s b/%s\n", e.Path, e.Path) + modes + d
	}
	return d
}

// DiffJSON is what `ag diff --json` prints.
type DiffJSON struct {
	BaseRevision string         `json:"baseRevision"`
	Files        []DiffFileJSON `json:"files"`
}

type DiffFileJSON struct {
	Path     string `json:"path"`
	Status   string `json:"status"` // added, modified or deleted
	Conflict bool   `json:"conflict,omitempty"`
	Binary   bool   `json:"binary"`
	Mode     string `json:"mode,omitempty"`     // the local mode, unless deleted
	BaseMode string `json:"baseMode,omitempty"` // the base revision's mode, unless added
	Diff     string `json:"diff"`               // the unified diff, headers included
}

// Revert drops the local edits under sel: modified and deleted files go back to the base
// revision, with its mode (a link as the link it was), added ones are removed. Nothing changes when something of the user's stands where a
// base file goes back.
func Revert(ctx context.Context, ws *Workspace, sel []string) (RevertJSON, error) {
	out := RevertJSON{Reverted: []EditJSON{}}
	edits, err := ws.Checkout.LocalEdits()
	if err != nil {
		return out, err
	}
	edits = EditsUnder(edits, sel)
	root, err := os.OpenRoot(ws.Checkout.root)
	if err != nil {
		return out, err
	}
	defer root.Close()
	// Every blob before the first change on disk.
	bases := map[string]string{}
	var restore []string
	for _, e := range edits {
		if e.Kind != "added" {
			bases[e.Path] = e.base
			restore = append(restore, e.Path)
		}
	}
	contents, err := fetchContents(ctx, ws.Client, bases, nil, nil)
	if err != nil {
		return out, fmt.Errorf("the base revision's files: %w", err)
	}
	if blocked, err := inTheWay(root, restore, nil, map[string]bool{}); err != nil {
		return out, err
	} else if len(blocked) > 0 {
		return out, &ConflictError{fmt.Errorf("something of yours stands where the base revision has a file; nothing was reverted. Move these aside first: %s", strings.Join(blocked, ", "))}
	}
	for _, e := range edits {
		if e.Kind == "added" {
			err = removeFile(root, e.Path)
		} else {
			err = writeEntry(root, e.Path, contents[e.Path], e.BaseMode)
		}
		if err != nil {
			return out, err
		}
		out.Reverted = append(out.Reverted, EditJSON{Path: e.Path, Status: e.Kind})
	}
	for p, rec := range ws.Checkout.Conflicts {
		if UnderAny(p, sel) {
			delete(ws.Checkout.Conflicts, p)
			if !stillKept(ws.Checkout.Conflicts, nil, rec.Ours) {
				_ = removeFile(root, oursPath(rec.Ours))
			}
		}
	}
	return out, ws.Checkout.saveIn(root)
}

// RevertJSON is what `ag revert --json` prints.
type RevertJSON struct {
	Reverted []EditJSON `json:"reverted"` // the edits dropped, by what they were
}

// inTheWay answers, described for a message, what stands where writes (files and links) and
// submodules' directories must go and is not ag's to remove: a symbolic link or special file on
// the way to a write, a file of the user's where the mainline now has a directory, and, under a
// directory where the mainline now has a file, anything but the files this sync deletes (a file
// the user added, a nested .git). A file or link at the very path written is replaced, never
// written through: the conflict rules decided it may go.
func inTheWay(root *os.Root, writes, submoduleDirs []string, deleting map[string]bool) ([]string, error) {
	var blocked []string
	seen := map[string]bool{}
	block := func(p, why string) {
		if !seen[p] {
			seen[p] = true
			blocked = append(blocked, p+" ("+why+")")
		}
	}
	for _, p := range writes {
		if err := checkWayTo(root, p, false, deleting, block); err != nil {
			return nil, err
		}
	}
	for _, p := range submoduleDirs {
		if err := checkWayTo(root, p, true, deleting, block); err != nil {
			return nil, err
		}
	}
	return blocked, nil
}

// checkWayTo reports to block what stands on the way to writing the file p (the directory p,
// for a submodule), from the top.
func checkWayTo(root *os.Root, p string, dir bool, deleting map[string]bool, block func(p, why string)) error {
	segs := strings.Split(p, "/")
	for i := 1; i <= len(segs); i++ {
		at := strings.Join(segs[:i], "/")
		info, err := root.Lstat(filepath.FromSlash(at))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		last := i == len(segs)
		kept := tracked(statOfInfo(info).mode)
		switch {
		case info.IsDir() && (!last || dir):
			continue
		case info.IsDir():
			return leftoversUnder(root, at, at, deleting, block)
		case kept && (last && !dir || deleting[at]):
			// Replaced under the conflict rules, or deleted before the write.
		case info.Mode().IsRegular():
			block(at, "a file of yours where the mainline now has a directory")
		default:
			block(at, describeMode(info.Mode())+", which ag neither writes through nor replaces")
		}
		return nil
	}
	return nil
}

// leftoversUnder reports to block what under dir, in the directory where the mainline now has
// the file file, would remain once the files in deleting are gone.
func leftoversUnder(root *os.Root, file, dir string, deleting map[string]bool, block func(p, why string)) error {
	entries, err := readDir(root, dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := dir + "/" + e.Name()
		switch {
		case e.IsDir():
			if _, reserved := repo.ReservedSegment(e.Name()); reserved {
				block(p, "a directory no repository may hold, where the mainline now has the file "+file)
				continue
			}
			if err := leftoversUnder(root, file, p, deleting, block); err != nil {
				return err
			}
		case (e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0) && deleting[p]:
		case e.Type().IsRegular():
			block(p, "a file of yours, where the mainline now has the file "+file)
		default:
			block(p, describeMode(e.Type())+", where the mainline now has the file "+file)
		}
	}
	return nil
}
