package gitwork

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ag-coord/ag/internal/checkout"
)

// PushRequest is what Push commits and pushes.
type PushRequest struct {
	// Message is the commit's, and so the change's.
	Message string
	// Paths selects the local changes at or under these repository paths ("a/" for a
	// directory); none selects every one.
	Paths []string
	// Wait follows the change to its verdict; otherwise the push answers once the change is
	// queued (-o ag.wait=false).
	Wait bool
	// WaitFor, when not 0, bounds that wait (-o ag.wait=DURATION): the push then answers the
	// change as it stands, not final.
	WaitFor time.Duration
	// Task, when set, is the task claim the change carries, "tsk_…#3" (-o ag.task).
	Task string
	// Progress gets the server's lines as they come, "remote: " cut off (nil: nowhere).
	Progress io.Writer
	// Lock, when set, is held while Push changes the tree (staging and committing, taking its
	// commit back, the sync after a landing) and not while the push waits for its verdict,
	// which may take minutes: the MCP server serializes its tools' writes to the tree.
	Lock sync.Locker
}

// PushResult is a change Push made, and what became of the tree.
type PushResult struct {
	Remote    string `json:"remote"`
	Commit    string `json:"commit"`    // the commit pushed: HEAD then
	Committed bool   `json:"committed"` // Push made Commit of the local changes
	ChangeID  string `json:"changeId"`
	// Lines are the server's, "remote: " cut off: the change's progress and its verdict.
	Lines []string `json:"lines"`
	// Landed is the mainline commit the change landed as, "" when the push did not see it land
	// (queued, rejected, or the verdict not heard).
	Landed string `json:"landed,omitempty"`
	// Refusal is the ref's refusal when the change did not land: the server's verdict
	// ("rejected by the gate (chg_…)"), or why the push stopped before it.
	Refusal string `json:"refusal,omitempty"`
	// TakenBack: the change was rejected or cancelled, and the commit Push made was taken back
	// (git reset --soft), so that its changes are local changes again, as a checkout keeps them.
	TakenBack bool `json:"takenBack"`
	// Sync is the tree brought to the mainline after a landing; SyncErr why that failed (the
	// change landed all the same).
	Sync    *SyncResult `json:"sync,omitempty"`
	SyncErr error       `json:"-"`
}

// PushRefusedError is a push the server refused before it made a change (a path not under a
// current lease, a conflict with the mainline, a pack refused): Lines are its reasons in its
// words. The commit Push made for it was taken back.
type PushRefusedError struct {
	Lines   []string
	Refusal string // the ref's refusal, as git reports it
}

func (e *PushRefusedError) Error() string {
	if len(e.Lines) == 0 {
		return "the push was refused: " + e.Refusal
	}
	return strings.Join(e.Lines, "\n")
}

// changeLine finds the change a push made in the server's first line about it: its progress
// ("chg_… queued at position 2", "chg_… validating (job …)", "chg_… integrated") or, without
// waiting, "queued as chg_… at position N: …". Only a push whose ref was taken, or refused with a
// verdict naming the change, is read for it, so a refused path named like a change is not one.
var (
	changeLine = regexp.MustCompile(`^(?:queued as )?(chg_[0-9A-Za-z]+) `)
	landedLine = regexp.MustCompile(`^landed as ([0-9a-f]{40,64}) \((chg_[0-9A-Za-z]+)\)`)
	// verdictRefusal is the ref's refusal of a push whose change was made: its verdict
	// ("rejected by the gate (chg_…)", "cancelled (chg_…)"), or the server losing sight of it
	// ("…: `ag change show chg_…`").
	verdictRefusal = regexp.MustCompile("\\((chg_[0-9A-Za-z]+)\\)$|`ag change show (chg_[0-9A-Za-z]+)`$")
)

// Push sends the tree's local changes to the mainline as one change: it stages them (all, or
// those under req.Paths), commits them with req.Message when anything is staged, and pushes
// HEAD to refs/for/main of the tree's remote under the holder's current leases, with token
// given to ag's credential helper as Sync gives it. With nothing staged and no commit the
// mainline lacks, it answers a *checkout.NothingError; a push refused before a change was made
// answers a *PushRefusedError. A change that landed brings the tree to the mainline (git pull
// --rebase); one rejected or cancelled leaves its changes local again. git's hooks are not run:
// the server checks every path of a push against the leases, in the words they would use.
func (t *Tree) Push(ctx context.Context, token string, req PushRequest) (*PushResult, error) {
	remote, err := t.Remote()
	if err != nil {
		return nil, err
	}
	lock(req.Lock)
	res, parent, err := t.commitChanges(ctx, remote, req)
	unlock(req.Lock)
	if err != nil {
		return nil, err
	}
	args := []string{"push", "--porcelain", "--no-verify", "--no-progress", "-o", "ag.holder=" + t.Holder}
	switch {
	case !req.Wait:
		args = append(args, "-o", "ag.wait=false")
	case req.WaitFor > 0:
		args = append(args, "-o", "ag.wait="+req.WaitFor.String())
	}
	if req.Task != "" {
		args = append(args, "-o", "ag.task="+req.Task)
	}
	lines := &remoteLines{to: req.Progress}
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", append(args, "--", remote, "HEAD:"+PushRef)...)
	cmd.Dir = t.Root
	cmd.Env = append(cmd.Environ(), helperEnv(token)...)
	cmd.Stdout, cmd.Stderr = &stdout, lines
	runErr := cmd.Run()
	lines.flush()
	res.Lines = append(res.Lines, lines.lines...)
	taken, refusal := refStatus(stdout.String())
	res.Refusal = refusal
	switch {
	case taken:
		res.ChangeID = firstChange(res.Lines)
		if res.ChangeID == "" {
			return res, fmt.Errorf("the push was taken, but the server named no change: %s", strings.Join(res.Lines, "; "))
		}
	case verdictRefusal.MatchString(refusal):
		m := verdictRefusal.FindStringSubmatch(refusal)
		res.ChangeID = m[1] + m[2]
	default:
		// No change was made: the commit goes back, and the changes are local again.
		if err := t.takeBack(ctx, req.Lock, res, parent); err != nil {
			return nil, err
		}
		if len(res.Lines) == 0 && refusal == "" {
			return nil, &GitError{Args: args, Err: runErr, Stderr: lines.other.String()}
		}
		return nil, &PushRefusedError{Lines: res.Lines, Refusal: refusal}
	}
	for _, l := range res.Lines {
		if m := landedLine.FindStringSubmatch(l); m != nil && m[2] == res.ChangeID {
			res.Landed = m[1]
		}
	}
	switch {
	case res.Landed != "":
		lock(req.Lock)
		res.Sync, res.SyncErr = t.pull(ctx, token, true)
		unlock(req.Lock)
	case strings.HasSuffix(refusal, "("+res.ChangeID+")"):
		// The server's verdict on a change that did not land: rejected or cancelled.
		if err := t.takeBack(ctx, req.Lock, res, parent); err != nil {
			return res, err
		}
	}
	return res, nil
}

// commitChanges stages and commits the local changes req selects, and answers the result to be,
// with HEAD's commit before ("" when Push made no commit).
func (t *Tree) commitChanges(ctx context.Context, remote string, req PushRequest) (*PushResult, string, error) {
	changes, err := t.LocalChanges(ctx)
	if err != nil {
		return nil, "", err
	}
	selected := changes
	if len(req.Paths) > 0 {
		selected = Under(changes, req.Paths)
	}
	res := &PushResult{Remote: remote, Lines: []string{}}
	parent := t.head(ctx)
	if len(selected) > 0 {
		if res.Committed, err = t.commit(ctx, selected, len(req.Paths) > 0, req.Message); err != nil {
			return nil, "", err
		}
	}
	if !res.Committed {
		parent = ""
		if !t.unpushed(ctx, remote) {
			all := make([]checkout.Edit, 0, len(changes))
			for _, c := range changes {
				all = append(all, checkout.Edit{Path: c.Path, Kind: c.Kind})
			}
			return nil, "", &checkout.NothingError{All: all, Only: req.Paths}
		}
	}
	res.Commit = t.head(ctx)
	return res, parent, nil
}

// commit stages the changes (every one, or only those, when only) and commits what is staged
// with message; false when nothing was staged.
func (t *Tree) commit(ctx context.Context, changes []LocalChange, only bool, message string) (bool, error) {
	add := []string{"add", "-A"}
	var spec io.Reader
	if only {
		add = append(add, "--pathspec-from-file=-", "--pathspec-file-nul")
		spec = pathspecs(changes)
	}
	if _, err := gitIn(ctx, t.Root, literal, spec, add...); err != nil {
		return false, err
	}
	out, err := gitCtx(ctx, t.Root, nil, "diff", "--cached", "--name-only", "-z", "--no-renames")
	if err != nil {
		return false, err
	}
	staged := map[string]bool{}
	for _, p := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
		staged[p] = true
	}
	if !slices.ContainsFunc(changes, func(c LocalChange) bool { return staged[c.Path] }) {
		return false, nil
	}
	// A NUL cannot reach git as an argument; the server makes it U+FFFD in a message too.
	msg := "--message=" + strings.ReplaceAll(message, "\x00", "\uFFFD")
	args := append(t.identity(ctx), "commit", "--quiet", "--no-verify", msg)
	if only {
		// Only these paths: what else was staged before stays staged, not pushed.
		args = append(args, "--only", "--pathspec-from-file=-", "--pathspec-file-nul")
		spec = pathspecs(changes)
	}
	_, err = gitIn(ctx, t.Root, literal, spec, args...)
	return err == nil, err
}

// literal makes git take paths as they are: a repository path may begin with ":" or hold "*".
var literal = []string{"GIT_LITERAL_PATHSPECS=1"}

// pathspecs answers the paths of changes, for --pathspec-from-file with --pathspec-file-nul.
func pathspecs(changes []LocalChange) io.Reader {
	var b strings.Builder
	for _, c := range changes {
		b.WriteString(c.Path)
		b.WriteByte(0)
	}
	return strings.NewReader(b.String())
}

// identity answers the -c options that give git an identity to commit with when it has none
// of its own: the commit only carries the change, and the mainline's commit is authored by the
// agent's principal and holder, whatever this one says.
func (t *Tree) identity(ctx context.Context) []string {
	if _, err := gitCtx(ctx, t.Root, nil, "var", "GIT_COMMITTER_IDENT"); err == nil {
		return nil
	}
	return []string{"-c", "user.name=" + t.Holder, "-c", "user.email=" + t.Holder + "@ag.invalid"}
}

// unpushed reports whether HEAD has a commit the mainline, as the tree last fetched it, lacks;
// true when the tree never fetched it: the server then says whether there is anything new.
func (t *Tree) unpushed(ctx context.Context, remote string) bool {
	head := t.head(ctx)
	if head == "" {
		return false
	}
	out, err := gitCtx(ctx, t.Root, nil, "rev-list", "--count", "refs/remotes/"+remote+"/"+MainBranch+"..HEAD", "--")
	return err != nil || strings.TrimSpace(out) != "0"
}

// takeBack undoes the commit Push made, keeping its changes staged, unless something else
// moved HEAD since.
func (t *Tree) takeBack(ctx context.Context, l sync.Locker, res *PushResult, parent string) error {
	if !res.Committed || parent == "" {
		return nil
	}
	lock(l)
	defer unlock(l)
	if t.head(ctx) != res.Commit {
		return nil
	}
	if _, err := gitCtx(ctx, t.Root, nil, "reset", "--quiet", "--soft", parent); err != nil {
		return err
	}
	res.TakenBack = true
	return nil
}

// refStatus reads `git push --porcelain`'s line for the pushed ref: whether it was taken, and
// the refusal when not ("" when git never got a status).
func refStatus(porcelain string) (taken bool, refusal string) {
	for _, line := range strings.Split(porcelain, "\n") {
		// "FLAG \t FROM:TO \t SUMMARY", SUMMARY "[remote rejected] (REASON)" for a refusal.
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 || !strings.HasSuffix(f[1], ":"+PushRef) {
			continue
		}
		if f[0] != "!" {
			return true, ""
		}
		_, reason, ok := strings.Cut(f[2], "] ")
		if !ok {
			return false, f[2]
		}
		return false, strings.TrimSuffix(strings.TrimPrefix(reason, "("), ")")
	}
	return false, ""
}

// firstChange answers the change the server's first line about one names.
func firstChange(lines []string) string {
	for _, l := range lines {
		if m := changeLine.FindStringSubmatch(l); m != nil {
			return m[1]
		}
		if m := landedLine.FindStringSubmatch(l); m != nil {
			return m[2]
		}
	}
	return ""
}

// remoteLines is git push's stderr: the server's lines ("remote: …") kept, cleaned of the prefix
// and of what git pads them with, and passed on as they come; the rest (git's own words) kept
// apart, for when git fails before the server answers.
type remoteLines struct {
	to      io.Writer
	partial []byte
	lines   []string
	other   bytes.Buffer
}

func (r *remoteLines) Write(b []byte) (int, error) {
	r.partial = append(r.partial, b...)
	for {
		i := bytes.IndexAny(r.partial, "\r\n")
		if i < 0 {
			return len(b), nil
		}
		r.line(string(r.partial[:i]))
		r.partial = r.partial[i+1:]
	}
}

func (r *remoteLines) flush() {
	if len(r.partial) > 0 {
		r.line(string(r.partial))
		r.partial = nil
	}
}

func (r *remoteLines) line(l string) {
	text, ok := strings.CutPrefix(l, "remote: ")
	if !ok {
		if l != "" {
			r.other.WriteString(l + "\n")
		}
		return
	}
	// git ends each line with a terminal's clear-to-end or, elsewhere, eight spaces.
	text = strings.TrimRight(strings.TrimSuffix(text, "\x1b[K"), " ")
	if text == "" {
		return
	}
	r.lines = append(r.lines, text)
	if r.to != nil {
		_, _ = io.WriteString(r.to, text+"\n")
	}
}

func lock(l sync.Locker) {
	if l != nil {
		l.Lock()
	}
}

func unlock(l sync.Locker) {
	if l != nil {
		l.Unlock()
	}
}
