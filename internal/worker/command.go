package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// Limits of what travels to the server (AGWP: progress <= 1 KiB, output <= 64 KiB).
const (
	maxProgressBytes = 1 << 10
	maxOutputBytes   = 64 << 10
)

// runSpec is one run of a command in its own process group.
type runSpec struct {
	Argv     []string
	Dir      string
	Env      []string // the command's whole environment
	Timeout  time.Duration
	LogPath  string                // stdout and stderr, together, go here
	Grace    time.Duration         // between SIGTERM and SIGKILL when the command is stopped
	Progress func(lastLine string) // called with each non-empty line of output, truncated
	// Follow, when set, is given at the start a function that answers the log's tail so far
	// (its last maxOutputBytes), for the heartbeats to send while the command runs.
	Follow func(tail func() string)
	// GroupFile, when set, receives the command's process group id as soon as it has started,
	// for ReapOrphans to find the group should the worker die. The command does not run on
	// unrecorded: when the file cannot be written, the group is killed and that is the error.
	GroupFile string
	// Sandbox, when set, runs the command in it, with Box as its read-write directories
	// (Box.Tree is Dir). The process group is then bwrap's.
	Sandbox *Sandbox
	Box     boxDirs
	// Limits, with Sandbox, holds the run to its cgroup and file system (Box's directories
	// are on it): bwrap joins the cgroup before it has its arguments, so before anything of
	// the sandbox runs, and a run that reaches a limit is stopped.
	Limits *runLimit
	// KeepFileSystem keeps the run's file system mounted in the worker once the sandbox
	// started, for a run that another follows on the same file system (the prepare phase).
	KeepFileSystem bool
}

// runResult is what a run did.
type runResult struct {
	Pgid       int // the process group of the command: its pid
	StartedAt  time.Time
	FinishedAt time.Time
	ExitCode   int  // -1 when it was killed or died of a signal
	TimedOut   bool // stopped when its timeout ran out
	Reason     string
	LogDigest  string // "sha256:<hex>" of the whole log
	LogBytes   int64
	Tail       string // the log's last maxOutputBytes, from a line boundary when possible
	Survivors  bool   // some process of the group, or of the sandbox, was still alive after SIGKILL
	// OwnPIDNamespace: the command ran in a PID namespace other than the worker's (a sandbox).
	OwnPIDNamespace bool
	// OverLimit is the limit the run reached, as runLimit.exceeded names it ("memory 4 GiB"),
	// "" when it reached none. Such a run failed, whatever its exit status.
	OverLimit string
}

// runCommand runs s.Argv in s.Dir as the leader of a new process group, with its output in
// s.LogPath. When the command exits, times out or ctx ends, every process left in its group is
// killed (SIGTERM, then SIGKILL after the grace) before runCommand returns. It answers the
// outcome of a command that exited or timed out; an error when the command could not start, or
// its log or s.GroupFile could not be written, and context.Cause(ctx) when ctx ended first.
//
// With s.Sandbox, the leader of the group is bwrap, and the command runs in its sandbox, in
// a session of its own: SIGTERM ends bwrap, and with it the sandbox, at once. Every process
// of the sandbox, in the group or not, is gone when runCommand returns.
func runCommand(ctx context.Context, s runSpec) (runResult, error) {
	var res runResult
	path, err := commandPath(s)
	if err != nil {
		return res, err
	}
	// Read through the same file as it is written: the log may be on the run's file system,
	// which is detached once the sandbox runs (Limits).
	logFile, err := os.OpenFile(s.LogPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return res, fmt.Errorf("create log: %w", err)
	}
	defer logFile.Close()
	// The command writes to a pipe of ours (not straight to the file) so that its lines can be
	// followed and hashed as they come. Both ends are *os.File: Wait does not wait for the
	// pipe, only for the command.
	pr, pw, err := os.Pipe()
	if err != nil {
		return res, fmt.Errorf("create output pipe: %w", err)
	}
	defer pr.Close()
	cmd := &exec.Cmd{Path: path, Args: s.Argv, Dir: s.Dir, Env: s.Env, Stdout: pw, Stderr: pw}
	var box *boxRun
	if s.Sandbox != nil {
		if cmd, box, err = s.Sandbox.command(s.Argv, s.Box, s.Env, pw); err != nil {
			pw.Close()
			return res, err
		}
		defer box.close()
	}
	inOwnGroup(cmd)
	sink := &logSink{file: logFile, hash: sha256.New(), progress: s.Progress}
	if s.Follow != nil {
		s.Follow(func() string {
			tail, _ := logTailOf(logFile, sink.size.Load(), maxOutputBytes)
			return tail
		})
	}

	res.StartedAt = time.Now()
	exited, err := startCommand(cmd)
	pw.Close()
	if err != nil {
		return res, fmt.Errorf("start %s: %w", s.Argv[0], err)
	}
	if err := releaseSandbox(cmd, exited, s.Limits, box, s.KeepFileSystem); err != nil {
		return res, err
	}
	res.Pgid = cmd.Process.Pid
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if s.GroupFile != "" { // before any output is read: progress comes after the record
		if err := os.WriteFile(s.GroupFile, []byte(strconv.Itoa(res.Pgid)+"\n"), 0o644); err != nil {
			cancel(fmt.Errorf("record the process group: %w", err)) // stops the command below
		}
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(sink, pr)
		sink.flush()
	}()

	timer := time.NewTimer(s.Timeout)
	defer timer.Stop()
	watched := make(chan struct{})
	defer close(watched)
	overLimit := s.Limits.watch(watched)
	var waitErr error
	stopped := false
	select {
	case waitErr = <-exited:
	case <-timer.C:
		res.TimedOut = true
		waitErr = stopGroup(res.Pgid, exited, s.Grace)
	case res.OverLimit = <-overLimit:
		waitErr = stopGroup(res.Pgid, exited, s.Grace)
	case <-ctx.Done():
		stopped = true
		waitErr = stopGroup(res.Pgid, exited, s.Grace)
	}
	res.FinishedAt = time.Now()
	reapRun(&res, box, s.Grace, pr, copied)
	if stopped {
		return res, context.Cause(ctx)
	}
	if box != nil && !box.commandRan(time.Second) {
		// Not a validation that failed: bwrap could not set the sandbox up. Its words are in
		// the log.
		tail, _ := logTailOf(logFile, sink.size.Load(), 2<<10)
		return res, fmt.Errorf("the sandbox did not start the command: %s", strings.TrimSpace(tail))
	}
	if s.Limits != nil && res.OverLimit == "" {
		// Once every process of the run is gone, its counts are final: the watch may not yet
		// have seen a limit reached just before the run ended.
		res.OverLimit = s.Limits.exceeded()
	}
	// A run that filled its disk may have filled it with its output, whose log is there too:
	// the log then holds what fitted, and the run failed for its disk, not the worker.
	if sink.err != nil && res.OverLimit == "" {
		return res, fmt.Errorf("write log: %w", sink.err)
	}

	if err := setExitStatus(&res, waitErr, s); err != nil {
		return res, err
	}
	res.LogDigest = "sha256:" + hex.EncodeToString(sink.hash.Sum(nil))
	res.LogBytes = sink.size.Load()
	if res.Tail, err = logTailOf(logFile, sink.size.Load(), maxOutputBytes); err != nil {
		return res, err
	}
	return res, nil
}

// commandPath checks that s can run at all, and answers the executable to start without a
// sandbox ("" with one, where bwrap finds it, and it was only checked to be there).
func commandPath(s runSpec) (string, error) {
	if len(s.Argv) == 0 {
		return "", errors.New("no command")
	}
	if s.Limits != nil && s.Sandbox == nil {
		// Without bwrap's wait for its arguments, the command would run before it joined
		// its cgroup.
		return "", errors.New("a run is held to limits in the sandbox only")
	}
	if s.Sandbox != nil {
		return "", s.Sandbox.lookPath(s.Argv[0], s.Box, s.Env)
	}
	return lookPath(s.Argv[0], s.Dir, s.Env)
}

// releaseSandbox lets bwrap, started and waiting for its arguments, go on, once it is in the
// run's cgroup (with limits). When it cannot join the cgroup, it is killed, and that is the error.
func releaseSandbox(cmd *exec.Cmd, exited <-chan error, limits *runLimit, box *boxRun, keep bool) error {
	if limits != nil {
		// bwrap reads its arguments (box.started hands them over) before it does anything
		// else: until then it has started nothing, so everything of the sandbox is born in
		// the run's cgroup.
		if err := limits.join(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			<-exited
			return err
		}
	}
	if box != nil {
		if limits != nil && !keep {
			box.onStart = limits.detach
		}
		box.started()
	}
	return nil
}

// reapRun, once the run's leader is gone, kills what it left behind and waits (a moment at
// most) for the output to be copied, noting in res whether anything survived.
func reapRun(res *runResult, box *boxRun, grace time.Duration, pr *os.File, copied <-chan struct{}) {
	// The leader is gone; what it left behind in its group goes too, exited or not.
	res.Survivors = !killGroup(res.Pgid, 5*time.Second)
	if box != nil {
		// And what it left in its sandbox, where setsid takes a process out of any group.
		gone, own := box.end(5 * time.Second)
		res.Survivors = res.Survivors || !gone
		res.OwnPIDNamespace = own
	}
	// The pipe ends when the last process holding it is gone. One that left the group may hold
	// it open for ever: stop reading after a moment.
	select {
	case <-copied:
	case <-time.After(max(grace, 100*time.Millisecond)):
		_ = pr.SetReadDeadline(time.Now())
		<-copied
	}
}

// setExitStatus sets res's exit code and reason from how the command ended (waitErr, from
// Wait), or answers the error of a wait that says nothing of the command's exit.
func setExitStatus(res *runResult, waitErr error, s runSpec) error {
	var exitErr *exec.ExitError
	switch {
	case res.TimedOut:
		res.ExitCode = -1
		res.Reason = "timed out after " + s.Timeout.String()
	case waitErr == nil:
		res.ExitCode = 0
	case errors.As(waitErr, &exitErr):
		res.ExitCode = exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = -1
			res.Reason = fmt.Sprintf("died of signal %d (%v)", int(ws.Signal()), ws.Signal())
		}
	default:
		return fmt.Errorf("wait for %s: %w", s.Argv[0], waitErr)
	}
	if res.OverLimit != "" {
		res.Reason = overLimitPrefix + res.OverLimit
	}
	return nil
}

// stopGroup asks the group to terminate, kills it when the leader has not exited within grace,
// and answers the leader's exit.
func stopGroup(pgid int, exited <-chan error, grace time.Duration) error {
	signalGroup(pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-exited:
		return err
	case <-t.C:
	}
	signalGroup(pgid, syscall.SIGKILL)
	return <-exited
}

// lookPath finds the command's executable: a name with a '/' relative to the checkout dir, a
// bare name in the absolute directories of the command's PATH. Relative PATH entries are
// skipped: they would find programs in the tree under validation instead of the worker's.
func lookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		found, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("command %q: %w", name, err)
		}
		return found, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v // the last one is the one the command sees
		}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(d) {
			continue
		}
		if found, err := exec.LookPath(filepath.Join(d, name)); err == nil {
			return found, nil
		}
	}
	return "", fmt.Errorf("command %q: %w (PATH=%s)", name, exec.ErrNotFound, pathEnv)
}

// logSink writes the command's output to the log file and its hash, and reports each
// non-empty line as progress. A write error is kept, not returned, so the command is never
// blocked on a full pipe.
type logSink struct {
	file     *os.File
	hash     hash.Hash
	size     atomic.Int64 // what was written so far; read by Follow's tail while the command runs
	err      error
	progress func(string)
	line     []byte // the current line, at most maxProgressBytes+utf8.UTFMax bytes of it
}

func (s *logSink) Write(p []byte) (int, error) {
	n := len(p)
	if s.err == nil {
		_, s.err = s.file.Write(p)
	}
	s.hash.Write(p)
	s.size.Add(int64(len(p)))
	if s.progress == nil {
		return n, nil
	}
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.keep(p)
			break
		}
		s.keep(p[:i])
		s.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (s *logSink) keep(p []byte) {
	if room := maxProgressBytes + utf8.UTFMax - len(s.line); room > 0 {
		s.line = append(s.line, p[:min(room, len(p))]...)
	}
}

// flush ends the current line: a line that is not blank becomes the progress.
func (s *logSink) flush() {
	if s.progress != nil && len(bytes.TrimSpace(s.line)) > 0 {
		s.progress(progressLine(string(s.line)))
	}
	s.line = s.line[:0]
}

// progressLine answers s as valid UTF-8 of at most maxProgressBytes, without surrounding
// space.
func progressLine(s string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= maxProgressBytes {
		return s
	}
	cut := maxProgressBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// logTail answers the last limit bytes of the log at path, whose size is size, as valid UTF-8.
// When it is cut it starts after a newline, unless the part kept has none.
func logTail(path string, size int64, limit int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read log: %w", err)
	}
	defer f.Close()
	return logTailOf(f, size, limit)
}

// logTailOf is logTail of the log open as f.
func logTailOf(f *os.File, size int64, limit int) (string, error) {
	if fi, err := f.Stat(); err == nil && fi.Size() < size {
		size = fi.Size() // the log's disk was full: it holds the start of the output only
	}
	start := max(0, size-int64(limit))
	from := start
	if start > 0 {
		from-- // one byte more, to know whether start is at a line boundary
	}
	b := make([]byte, size-from)
	if _, err := f.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read log: %w", err)
	}
	if start > 0 {
		before := b[0]
		b = b[1:]
		if before != '\n' {
			if i := bytes.IndexByte(b, '\n'); i >= 0 && i+1 < len(b) {
				b = b[i+1:]
			}
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	for len(s) > limit { // replacement characters are longer than the bytes they replace
		s = s[len(s)-limit:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return s, nil
}
