package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/egress"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
)

// Validator runs the jobs of kind "validate" (client.KindValidate): it checks out the
// candidate tree the job names, runs the repository's validation command in it, and signs an
// in-toto attestation of the outcome, which says how the command was isolated. The
// attestation's subject is the tree it checked out, by the git tree id and the tree digest of
// exactly the files it wrote; it runs nothing when either is not the one the job names. Its
// Handle is a Handler.
//
// The command is code an agent wrote. It runs in Sandbox, which holds none of the worker's
// secrets; without one, Handle refuses to run it unless Unsandboxed says to run it with the
// worker's own rights, with which it can read the worker's token and key and sign any result.
type Validator struct {
	Client *client.Client
	Signer *attest.Signer
	// CacheDir keeps fetched blobs by digest. Workers may share it: every file in it appears
	// whole (written aside, then renamed) and is checked against its digest when used.
	CacheDir string
	// WorkDir is where each run gets a fresh temporary directory (default os.TempDir()),
	// removed when the run ends. Workers may share it: each holds a lock on the directories
	// of its runs, and ReapOrphans removes only those that no live worker holds.
	WorkDir string
	Logger  *slog.Logger
	// KillGrace is how long a command that is stopped (timeout, lost claim, shutdown) has
	// between SIGTERM and SIGKILL. Default 2s. A sandboxed command ends at once.
	KillGrace time.Duration
	// Sandbox isolates the commands (NewSandbox). Without it, commands run only when
	// Unsandboxed is set, and each run logs a warning.
	Sandbox     *Sandbox
	Unsandboxed bool
	// runs keeps a run that failed beside another from being charged before it failed alone.
	runs runGate
	// Egress is the proxy of the runs whose policy asks for egress. Without it they get one
	// that allows no host, and say so to whatever asks.
	Egress *egress.Proxy
	// Limits holds each sandboxed run to the worker's limits, or less when the job's policy
	// asks (NewLimiter). Without it, runs are held by their timeout only.
	Limits *Limiter
	// warming holds the repositories whose caches a prepare phase fills after a run
	// (warmLater), so that one at a time does.
	warming sync.Map
	// preparing holds a mutex for each repository's caches: one prepare phase at a time
	// before a command (presetBeforeCommand).
	preparing sync.Map
	// trees holds the mainline trees protected paths came from (mainlineTree).
	treesMu sync.Mutex
	trees   map[string]repo.Tree
}

// errNoSandbox: the validator has neither a sandbox nor the operator's word to run without.
var errNoSandbox = errors.New("this worker has no sandbox for validation commands: " +
	"install bubblewrap, or start ag-worker with --unsafe-no-sandbox to run them with the worker's own rights")

// blobFetchers bounds the GetBlobs calls in flight at once.
const blobFetchers = 4

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Handle runs one validate job. A command that exits, with any status, or times out completes
// the job with a signed attestation of PASSED or FAILED. A payload that cannot be run, or a
// tree that is not the one the job names, fails it for good; a tree or blob that cannot be
// fetched, or a command that cannot be started, fails this attempt. When ctx ends before the
// command does, the command is killed and Handle answers ctx's cause.
func (v *Validator) Handle(ctx context.Context, job *Job) (Outcome, error) {
	if v.Client == nil || v.Signer == nil || v.CacheDir == "" {
		return Outcome{}, errors.New("validator: a client, a signer and a cache directory are required")
	}
	p, err := client.ParseValidatePayload(job.GetPayload())
	if err != nil {
		return Outcome{}, Permanent(err)
	}
	timeout, err := p.TimeoutDuration()
	if err != nil {
		return Outcome{}, Permanent(err)
	}
	askedLimits, err := payloadLimits(job.GetPayload())
	if err != nil {
		return Outcome{}, Permanent(err)
	}
	isolation, network := attest.IsolationBubblewrap, attest.NetworkNone
	var env []string
	switch {
	case v.Sandbox == nil:
		isolation, network = attest.IsolationNone, attest.NetworkShared
		env, err = commandEnv(os.Environ(), p.Env)
	case v.Sandbox.shared:
		network = attest.NetworkShared
		env, err = v.Sandbox.Env(p.Env)
	case p.Network == attest.NetworkEgress:
		network = attest.NetworkEgress
		env, err = v.Sandbox.Env(egressEnv(p.Env))
	default:
		env, err = v.Sandbox.Env(p.Env)
	}
	if err != nil {
		return Outcome{}, Permanent(err)
	}
	if v.Sandbox == nil && !v.Unsandboxed {
		return Outcome{}, errNoSandbox // not for good: another worker may have one
	}
	log := v.logger().With("job", job.GetId(), "repository", p.Repository, "revision", p.CandidateRevision)
	if isolation == attest.IsolationNone {
		log.Warn("UNSAFE: running the validation command without a sandbox (--unsafe-no-sandbox): " +
			"it can read this worker's token and key, and sign any result")
	}

	job.Progress("fetching tree")
	tree, err := v.fetchTree(ctx, p)
	if err != nil {
		return Outcome{}, orCause(ctx, err)
	}
	if err := v.fetchBlobs(ctx, tree); err != nil {
		return Outcome{}, orCause(ctx, err)
	}
	protected, err := v.protectedOverlay(ctx, p, tree)
	if err != nil {
		return Outcome{}, orCause(ctx, err)
	}
	run := func(alone bool) (runResult, string, error) {
		leave := v.runs.enter(alone)
		res, gitTree, err := v.runOnce(ctx, job, p, tree, protected, env, network, timeout, askedLimits, log)
		if overlapped := leave(); !alone && overlapped && err == nil && !res.passed() {
			return res, gitTree, errRanBeside
		}
		return res, gitTree, err
	}
	res, gitTree, err := run(false)
	if errors.Is(err, errRanBeside) {
		// Another candidate's code ran beside this one on this machine, and may be what
		// failed it (a port it held, the CPU it took until a timeout): a failure is charged to
		// a change only once its candidate failed with nothing else running here.
		log.Info("the command failed while another validation ran on this worker: running it again alone",
			"exit_code", res.ExitCode, "reason", res.Reason)
		job.Progress("failed while another validation ran beside it: running it again alone")
		res, gitTree, err = run(true)
	}
	if err != nil {
		return Outcome{}, err
	}
	// The tree digest of the entries whose files materialize wrote and checked (path, content's
	// sha256 and size): fetchTree checked it against the job's when the job names one.
	treeDigest := tree.Digest()

	result := attest.ResultFailed
	if res.passed() {
		result = attest.ResultPassed
	}
	val := attest.Validation{
		Repository:  p.Repository,
		Revision:    p.CandidateRevision,
		TreeDigest:  treeDigest,
		GitTree:     gitTree,
		Result:      result,
		Command:     p.Command,
		Timeout:     timeout,
		JobID:       job.GetId(),
		ClaimNumber: job.GetAttempts(),
		Worker:      job.GetClaimedBy(),
		StartedAt:   res.StartedAt,
		FinishedAt:  res.FinishedAt,
		ExitCode:    res.ExitCode,
		LogDigest:   res.LogDigest,
		Reason:      res.Reason,
		Isolation:   isolation,
		Network:     network,
	}
	if protected != nil {
		val.Protected = &protected.from
	}
	if preset, ok := workerPresets[p.Preset]; ok && preset.warmsAfter() && v.Sandbox != nil {
		v.warmLater(p, protected.over(tree), timeout, askedLimits, log)
	}
	return v.attestedOutcome(ctx, val, res, log)
}

// attestedOutcome signs val, the attestation of the run res, and answers the job's outcome
// with it: the result's fields, the output's tail and the attestation.
func (v *Validator) attestedOutcome(ctx context.Context, val attest.Validation, res runResult, log *slog.Logger) (Outcome, error) {
	signed, err := v.Signer.SignValidation(ctx, val)
	if err != nil {
		return Outcome{}, fmt.Errorf("sign the attestation: %w", err)
	}
	envelope, err := attest.ToProto(signed)
	if err != nil {
		return Outcome{}, fmt.Errorf("sign the attestation: %w", err)
	}
	fields := map[string]any{
		"result":      val.Result,
		"exit_code":   res.ExitCode,
		"duration_ms": res.FinishedAt.Sub(res.StartedAt).Milliseconds(),
		"isolation":   val.Isolation,
		"network":     val.Network,
	}
	if res.Reason != "" {
		fields["reason"] = res.Reason
	}
	resultStruct, err := structpb.NewStruct(fields)
	if err != nil {
		return Outcome{}, err
	}
	log.Info("validated", "result", val.Result, "exit_code", res.ExitCode, "reason", res.Reason,
		"elapsed", res.FinishedAt.Sub(res.StartedAt).Round(time.Millisecond))
	return Outcome{Result: resultStruct, Output: res.Tail, OutputDigest: res.LogDigest, Attestation: envelope}, nil
}

// runOnce checks the candidate out in a run directory of its own and runs its command there,
// held to its limits, and answers what the run did and the git tree it checked out. The run's
// directory, cgroup, file system and egress proxy go with it.
func (v *Validator) runOnce(ctx context.Context, job *Job, p client.ValidatePayload, tree repo.Tree, protected *protectedOverlay,
	env []string, network string, timeout time.Duration, askedLimits Limits, log *slog.Logger) (runResult, string, error) {
	rd, err := newRunDir(v.workDir())
	if err != nil {
		return runResult{}, "", fmt.Errorf("create work directory: %w", err)
	}
	dir := rd.path
	defer func() {
		if err := rd.remove(); err != nil {
			log.Warn("could not remove the work directory", "dir", dir, "err", err)
		}
	}()
	// The run's cgroup, and its file system, where its checkout and all it writes go.
	boxRoot := dir
	var limits *runLimit
	if v.Sandbox != nil && v.Limits != nil {
		limits, err = v.Limits.prepare(dir, askedLimits)
		defer func() {
			if err := limits.release(); err != nil {
				log.Warn("could not release the run's cgroup or file system", "err", err)
			}
		}()
		if err != nil {
			return runResult{}, "", fmt.Errorf("hold the run to its limits: %w", err)
		}
		boxRoot = limits.root
	}
	// The log lives beside the checkout, not in it, where the command would see it.
	checkout := filepath.Join(boxRoot, "tree")
	if err := os.Mkdir(checkout, 0o755); err != nil {
		return runResult{}, "", fmt.Errorf("create work directory: %w", err)
	}
	gitTree, err := v.materialize(ctx, checkout, tree)
	if err != nil {
		return runResult{}, "", orCause(ctx, limits.explain(err))
	}
	if p.GitTree != "" && gitTree != p.GitTree {
		return runResult{}, "", Permanent(fmt.Errorf("the files of %s@%s make git tree %s, but the job validates git tree %s",
			p.Repository, p.CandidateRevision, gitTree, p.GitTree))
	}
	var box boxDirs
	runLog := []any{"command", p.Command, "files", len(tree), "git_tree", gitTree, "timeout", timeout, "network", network}
	if protected != nil {
		// The candidate was checked whole above; the run sees the mainline's protected paths.
		if err := protected.apply(v, checkout); err != nil {
			return runResult{}, "", orCause(ctx, limits.explain(err))
		}
		runLog = append(runLog, "protected_from", protected.from.Revision, "protected", protected.from.Paths)
	}
	if v.Sandbox != nil {
		if box, err = makeBoxDirs(boxRoot, checkout); err != nil {
			return runResult{}, "", fmt.Errorf("create work directory: %w", err)
		}
		box.Network = network
		if network == attest.NetworkEgress {
			proxy := v.Egress
			if proxy == nil {
				if proxy, err = egress.New(nil, log); err != nil {
					return runResult{}, "", err
				}
			}
			sock, session, err := serveEgress(proxy, dir)
			if err != nil {
				return runResult{}, "", err
			}
			defer session.Close()
			box.EgressSocket = sock
		}
		// The run's own copy of the Go build cache seed: it writes that, never the seed.
		if v.Sandbox.GoSeeded() {
			took, err := v.Sandbox.seedGoCache(box)
			if err != nil {
				return runResult{}, "", limits.explain(err)
			}
			runLog = append(runLog, "go_seed_copy", took.Round(time.Millisecond))
		}
	}

	if limits != nil {
		runLog = append(runLog, "limits", limits.String())
	}
	if _, ok := workerPresets[p.Preset]; ok && v.Sandbox != nil {
		env, err = v.presetBeforeCommand(ctx, job, p, protected.over(tree),
			prepareRun{dir: dir, boxRoot: boxRoot, groupFile: rd.groupFile(), limits: limits}, &box, env, timeout, log)
		if err != nil {
			return runResult{}, "", orCause(ctx, limits.explain(err))
		}
		runLog = append(runLog, "preset", p.Preset)
	}
	job.Progress(progressLine("running " + strings.Join(p.Command, " ")))
	log.Info("running", runLog...)
	res, err := runCommand(ctx, runSpec{
		Argv: p.Command, Dir: checkout, Env: env, Timeout: timeout,
		LogPath: filepath.Join(boxRoot, "output.log"), Grace: v.killGrace(), Progress: job.Progress, Follow: job.FollowOutput,
		GroupFile: rd.groupFile(), Sandbox: v.Sandbox, Box: box, Limits: limits,
	})
	if res.Survivors {
		log.Warn("processes of the command outlived SIGKILL", "pgid", res.Pgid)
	}
	if err != nil {
		return runResult{}, "", orCause(ctx, err)
	}
	if v.Sandbox != nil && !res.OwnPIDNamespace {
		// Never attest an isolation that did not happen.
		return runResult{}, "", errors.New("the sandbox did not give the command a PID namespace of its own: not attested")
	}

	return res, gitTree, nil
}

// orCause answers ctx's cause when ctx has ended (the error is then most likely its
// consequence), err otherwise.
func orCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

func (v *Validator) logger() *slog.Logger {
	if v.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return v.Logger
}

func (v *Validator) workDir() string {
	if v.WorkDir == "" {
		return os.TempDir()
	}
	return v.WorkDir
}

func (v *Validator) killGrace() time.Duration {
	if v.KillGrace <= 0 {
		return 2 * time.Second
	}
	return v.KillGrace
}

// commandEnv answers the command's environment: the worker's, without its token, then the
// payload's (which wins), in a stable order.
func commandEnv(base []string, extra map[string]string) ([]string, error) {
	env := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		if strings.HasPrefix(kv, "AG_TOKEN=") {
			continue // the command under validation must not act as the worker
		}
		env = append(env, kv)
	}
	keys := make([]string, 0, len(extra))
	for k, val := range extra {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(val, 0) {
			return nil, fmt.Errorf("validate payload: env %q: names hold no '=' or NUL, values no NUL", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k]) // exec uses the last value of a repeated name
	}
	return env, nil
}

// fetchTree answers the candidate's files, after checking that the digest of the entries
// themselves is the server's, and the job's when the job names one (a job may name the git tree
// alone: materialize computes that one from the files).
func (v *Validator) fetchTree(ctx context.Context, p client.ValidatePayload) (repo.Tree, error) {
	return v.fetchRevisionTree(ctx, p.Repository, p.CandidateRevision, p.TreeDigest)
}

// fetchRevisionTree answers the files of repository@revision, checked as fetchTree says;
// want is the tree digest the job names, or "".
func (v *Validator) fetchRevisionTree(ctx context.Context, repository, revision, want string) (repo.Tree, error) {
	res, err := v.Client.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: repository, Revision: revision})
	if err != nil {
		return nil, fmt.Errorf("get the tree of %s@%s: %w", repository, revision, err)
	}
	if res.GetRevision() != revision {
		return nil, fmt.Errorf("asked for the tree of revision %s, the server answered revision %s", revision, res.GetRevision())
	}
	if want != "" && res.GetTreeDigest() != want {
		return nil, Permanent(fmt.Errorf("the tree of %s@%s is %s, but the job validates tree %s",
			repository, revision, res.GetTreeDigest(), want))
	}
	tree := make(repo.Tree, 0, len(res.GetEntries()))
	for _, e := range res.GetEntries() {
		if err := repo.ValidatePath(e.GetPath(), false); err != nil {
			return nil, Permanent(fmt.Errorf("the tree of %s@%s holds path %q, which %v", repository, revision, e.GetPath(), err))
		}
		entry, err := treeEntry(e)
		if err != nil {
			return nil, Permanent(fmt.Errorf("the tree of %s@%s: %w", repository, revision, err))
		}
		tree = append(tree, entry)
	}
	sort.Slice(tree, func(i, j int) bool { return tree[i].Path < tree[j].Path })
	got := tree.Digest()
	if want != "" && got != want {
		return nil, Permanent(fmt.Errorf("the entries the server answered for %s@%s hash to %s, not to the job's tree %s",
			repository, revision, got, want))
	}
	if res.GetTreeDigest() != "" && got != res.GetTreeDigest() {
		return nil, Permanent(fmt.Errorf("the entries the server answered for %s@%s hash to %s, not to the tree %s it named",
			repository, revision, got, res.GetTreeDigest()))
	}
	return tree, nil
}

// blobPath answers where the blob of digest is kept in the cache: sha256/ab/abcdef...
func (v *Validator) blobPath(digest string) string {
	hexDigest := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(v.CacheDir, "sha256", hexDigest[:2], hexDigest)
}

// fetchBlobs fetches the blobs of tree that the cache lacks, several at a time; a large one
// is streamed into the cache (ReadBlob), so the worker never holds it whole.
func (v *Validator) fetchBlobs(ctx context.Context, tree repo.Tree) error {
	var missing, large []string
	seen := map[string]bool{}
	for _, e := range tree {
		if seen[e.Digest] || e.GitMode() == repo.ModeGitlink { // a submodule has no blob
			continue
		}
		seen[e.Digest] = true
		if _, err := os.Stat(v.blobPath(e.Digest)); err == nil {
			continue
		}
		if e.Size >= client.LargeBlobBytes {
			large = append(large, e.Digest)
		} else {
			missing = append(missing, e.Digest)
		}
	}
	for _, d := range large {
		if err := v.cacheBlobFrom(d, func(w io.Writer) error {
			_, err := v.Client.ReadBlob(ctx, d, w)
			return err
		}); err != nil {
			return err
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return v.Client.Blobs(ctx, missing, blobFetchers, v.cacheBlob)
}

// cacheBlob keeps a fetched blob (the client checked its digest) in the cache.
func (v *Validator) cacheBlob(digest string, content []byte) error {
	return v.cacheBlobFrom(digest, func(w io.Writer) error {
		_, err := w.Write(content)
		return err
	})
}

// cacheBlobFrom keeps the blob that write writes in the cache, once write succeeded (a
// streamed blob is checked against its digest at its end).
func (v *Validator) cacheBlobFrom(digest string, write func(io.Writer) error) error {
	path := v.blobPath(digest)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("blob cache: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("blob cache: %w", err)
	}
	defer os.Remove(f.Name()) // gone already after the rename
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Another worker sharing the cache may do the same at once: same content, either wins.
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("blob cache: %w", err)
	}
	return nil
}

// materialize writes the files of tree under root, which must be empty, from the blob cache,
// as git checks them out: a file of mode 100644 as 0644, 100755 as 0755, a symbolic link as a
// link to its blob's bytes, a submodule as an empty directory (git clone does so without
// --recurse-submodules). It answers the git tree id of what it wrote, each entry with its mode,
// from the bytes it wrote. It refuses a path that is not clean, and one that lies under a link,
// file or submodule of the tree: everything is written through root (os.Root), by a path on
// which the tree holds no link, so a link (to /etc/passwd, ../../outside, .git/config, itself)
// is written as a link and never read or written through.
func (v *Validator) materialize(ctx context.Context, root string, tree repo.Tree) (string, error) {
	if err := checkNothingUnder(tree); err != nil {
		return "", err
	}
	dir, err := os.OpenRoot(root)
	if err != nil {
		return "", fmt.Errorf("check out: %w", err)
	}
	defer dir.Close()
	files := make([]gitstore.File, 0, len(tree))
	for _, e := range tree {
		if err := ctx.Err(); err != nil {
			return "", context.Cause(ctx)
		}
		name, err := checkoutName(e.Path)
		if err != nil {
			return "", err
		}
		mode, err := gitstore.FileMode(e.Mode)
		if err != nil {
			return "", fmt.Errorf("check out %s: %w", e.Path, err)
		}
		if parent := filepath.Dir(name); parent != "." {
			if err := dir.MkdirAll(parent, 0o755); err != nil {
				return "", fmt.Errorf("check out %s: %w", e.Path, err)
			}
		}
		var id plumbing.Hash
		if mode == filemode.Submodule {
			if !repo.IsGitID(e.GitlinkCommit) {
				return "", fmt.Errorf("check out %s: the submodule's commit %q is not 40 lowercase hex", e.Path, e.GitlinkCommit)
			}
			id = plumbing.NewHash(e.GitlinkCommit)
			err = dir.Mkdir(name, 0o755)
		} else {
			if !digestPattern.MatchString(e.Digest) {
				return "", fmt.Errorf("check out %s: %q is not a digest", e.Path, e.Digest)
			}
			id, err = v.copyBlob(dir, name, e, mode)
		}
		if err != nil {
			return "", fmt.Errorf("check out %s: %w", e.Path, err)
		}
		files = append(files, gitstore.File{Path: e.Path, Blob: id, Mode: mode})
	}
	id, err := gitstore.WriteTree(hashOnly{}, files)
	if err != nil {
		return "", fmt.Errorf("git tree of the checkout: %w", err)
	}
	return id.String(), nil
}

// checkoutName answers the name under the checkout of the tree path p, refusing any path that
// is not clean or does not stay inside it.
func checkoutName(p string) (string, error) {
	if err := repo.ValidatePath(p, false); err != nil {
		return "", fmt.Errorf("refused to check out path %q: it %v", p, err)
	}
	local := filepath.FromSlash(p)
	if !filepath.IsLocal(local) {
		return "", fmt.Errorf("refused to check out path %q: it leaves the checkout", p)
	}
	return local, nil
}

// copyBlob writes e's blob from the cache to name under dir, a new file of mode (0644 for
// filemode.Regular, 0755 for Executable) or, for filemode.Symlink, a symbolic link whose target
// is the blob's bytes; it checks the blob's digest and size on the way, and answers the git
// blob id of the bytes it wrote. A cached blob that does not match its digest is removed, so
// the next attempt fetches it again.
func (v *Validator) copyBlob(dir *os.Root, name string, e repo.Entry, mode filemode.FileMode) (plumbing.Hash, error) {
	if e.Size > math.MaxInt64 {
		return plumbing.ZeroHash, fmt.Errorf("the tree says %d bytes for blob %s", e.Size, e.Digest)
	}
	src, err := os.Open(v.blobPath(e.Digest))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("blob cache: %w", err)
	}
	defer src.Close()
	h := sha256.New()
	// A git blob's id hashes its size first: the entry's, which the bytes written must have.
	gitBlob := plumbing.NewHasher(plumbing.BlobObject, int64(e.Size))
	var n int64
	switch mode {
	case filemode.Symlink:
		if e.Size > repo.MaxSymlinkTarget {
			return plumbing.ZeroHash, fmt.Errorf("a symbolic link whose target is %d bytes, more than %d", e.Size, repo.MaxSymlinkTarget)
		}
		// The target is checked whole before the link is made, so it is read first.
		var target []byte
		if target, err = io.ReadAll(io.LimitReader(src, repo.MaxSymlinkTarget+1)); err == nil {
			n = int64(len(target))
			h.Write(target)
			gitBlob.Write(target)
			err = v.checkBlob(e, h, n)
		}
		if err == nil {
			err = repo.CheckSymlinkTarget(target)
		}
		if err == nil {
			err = dir.Symlink(string(target), name)
		}
		if err != nil {
			return plumbing.ZeroHash, err
		}
		return gitBlob.Sum(), nil
	case filemode.Regular, filemode.Executable:
	default:
		return plumbing.ZeroHash, fmt.Errorf("mode %o is no file's", uint32(mode))
	}
	perm := os.FileMode(0o644)
	if mode == filemode.Executable {
		perm = 0o755
	}
	out, err := dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	n, err = io.Copy(io.MultiWriter(out, h, gitBlob), src)
	if err == nil {
		err = out.Chmod(perm) // whatever the umask
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = v.checkBlob(e, h, n)
	}
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return gitBlob.Sum(), nil
}

// checkBlob checks that the n bytes of e's blob read from the cache, whose sha256 is h, are
// e's: a cached blob of another digest is removed.
func (v *Validator) checkBlob(e repo.Entry, h hash.Hash, n int64) error {
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != e.Digest {
		_ = os.Remove(v.blobPath(e.Digest))
		return fmt.Errorf("the cached blob %s has digest %s: removed it from the cache", e.Digest, got)
	}
	if uint64(n) != e.Size {
		return fmt.Errorf("the tree says %d bytes, blob %s has %d", e.Size, e.Digest, n)
	}
	return nil
}

// removeAll removes dir, also when the command left directories without write permission.
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// errRanBeside: the run failed while another ran on this worker, so its failure says nothing
// yet about its own candidate.
var errRanBeside = errors.New("the run failed while another ran beside it")

// passed reports whether a run is a pass: it exited 0 by itself, within its time and limits.
func (r runResult) passed() bool { return r.ExitCode == 0 && !r.TimedOut && r.OverLimit == "" }

// runGate tells whether a run of this worker ran while another did, and runs one alone when
// asked: every run holds it shared; a run alone holds it whole, so it starts once the others
// ended, and none starts before it ends.
type runGate struct {
	mu     sync.RWMutex
	state  sync.Mutex
	active int    // runs holding mu now
	starts uint64 // runs that ever took mu
}

// enter takes the gate, shared or alone, and answers the function that lets go of it, which
// reports whether another run held the gate at any moment while this one did.
func (g *runGate) enter(alone bool) (leave func() (overlapped bool)) {
	if alone {
		g.mu.Lock()
	} else {
		g.mu.RLock()
	}
	g.state.Lock()
	overlapped := g.active > 0
	g.active++
	mine := g.starts
	g.starts++
	g.state.Unlock()
	return func() bool {
		g.state.Lock()
		overlapped = overlapped || g.starts != mine+1
		g.active--
		g.state.Unlock()
		if alone {
			g.mu.Unlock()
		} else {
			g.mu.RUnlock()
		}
		return overlapped
	}
}
