package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"connectrpc.com/connect"

	"github.com/go-git/go-git/v5/plumbing"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/gate"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// Limits of content requests (api.md: 10,000 edits and 64 MiB of content per request).
const (
	maxEdits          = 10000
	maxContentBytes   = 64 << 20
	maxDigestsPerCall = 10000
	maxMessageBytes   = 64 << 10
	maxFencingTokens  = 1000
	maxChangeWait     = 60 * time.Second
)

// repoService serves RepositoryService.
type repoService struct {
	s *Server
}

var changeStates = map[store.ChangeState]agwpv1.ChangeState{
	store.ChangeQueued:           agwpv1.ChangeState_CHANGE_STATE_QUEUED,
	store.ChangeValidating:       agwpv1.ChangeState_CHANGE_STATE_VALIDATING,
	store.ChangeIntegrated:       agwpv1.ChangeState_CHANGE_STATE_INTEGRATED,
	store.ChangeRejected:         agwpv1.ChangeState_CHANGE_STATE_REJECTED,
	store.ChangeCancelled:        agwpv1.ChangeState_CHANGE_STATE_CANCELLED,
	store.ChangeAwaitingApproval: agwpv1.ChangeState_CHANGE_STATE_AWAITING_APPROVAL,
}

func repositoryProto(r store.Repository) *agwpv1.Repository {
	out := &agwpv1.Repository{Name: r.Name, Mainline: r.Mainline, Validation: validationProto(r.Validation),
		CreatedAt: timestamp(r.CreatedAt), MainlineCommit: r.MainlineCommit}
	for _, id := range r.Shallow {
		out.Shallow = append(out.Shallow, id.String())
	}
	return out
}

func changeProto(c store.Change) *agwpv1.Change {
	return &agwpv1.Change{
		Id:                 c.ID,
		Repository:         c.Repository,
		State:              changeStates[c.State],
		BaseRevision:       c.BaseRevision,
		CandidateRevision:  c.CandidateRevision,
		IntegratedRevision: c.IntegratedRevision,
		Author:             c.Holder,
		Message:            c.Message,
		Paths:              c.Paths,
		JobId:              c.JobID,
		AttestationDigest:  c.AttestationDigest,
		Reason:             c.Reason,
		CreatedAt:          timestamp(c.CreatedAt),
		UpdatedAt:          timestamp(c.UpdatedAt),
		ApprovedBy:         c.ApprovedBy,
		ApprovedAt:         timestamp(c.ApprovedAt),
		TaskId:             c.TaskID,
		TaskClaimNumber:    c.TaskClaimNumber,
	}
}

func (h repoService) CreateRepository(ctx context.Context, req *agwpv1.CreateRepositoryRequest) (*agwpv1.CreateRepositoryResponse, error) {
	if err := validateName("name", req.GetName()); err != nil {
		return nil, err
	}
	policy, err := validationPolicy("validation", req.GetValidation())
	if err != nil {
		return nil, err
	}
	shallow, err := shallowCommits(req)
	if err != nil {
		return nil, err
	}
	var head plumbing.Hash
	if req.GetGitCommit() != "" {
		if head, err = store.ParseGitID(req.GetGitCommit()); err != nil {
			return nil, invalid("git_commit", "%v", err)
		}
		if err := h.checkImportHead(ctx, head); err != nil {
			return nil, err
		}
		if err := h.checkImportHistory(ctx, head, shallow); err != nil {
			return nil, err
		}
	}
	r, err := h.s.store.CreateRepository(ctx, store.CreateRepositoryParams{Name: req.GetName(), Validation: policy,
		CreatedBy: callerFrom(ctx).principal.Name, GitCommit: head, Shallow: shallow})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	if r.MainlineCommit != "" {
		h.s.warmPackCache(r.Name)
	}
	return &agwpv1.CreateRepositoryResponse{Repository: repositoryProto(r)}, nil
}

func (h repoService) GetRepository(ctx context.Context, req *agwpv1.GetRepositoryRequest) (*agwpv1.GetRepositoryResponse, error) {
	if err := validateName("name", req.GetName()); err != nil {
		return nil, err
	}
	r, err := h.s.store.GetRepository(ctx, req.GetName())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out, err := h.repositoryWithMirror(ctx, r)
	if err != nil {
		return nil, err
	}
	return &agwpv1.GetRepositoryResponse{Repository: out}, nil
}

func (h repoService) ListRepositories(ctx context.Context, req *agwpv1.ListRepositoriesRequest) (*agwpv1.ListRepositoriesResponse, error) {
	limit, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	rs, next, err := h.s.store.ListRepositories(ctx, store.ListRepositoriesParams{Limit: limit, PageToken: req.GetPageToken()})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.ListRepositoriesResponse{NextPageToken: next}
	for _, r := range rs {
		out.Repositories = append(out.Repositories, repositoryProto(r))
	}
	return out, nil
}

func (h repoService) UploadBlobs(ctx context.Context, req *agwpv1.UploadBlobsRequest) (*agwpv1.UploadBlobsResponse, error) {
	if len(req.GetBlobs()) > maxEdits {
		return nil, invalid("blobs", "has %d blobs, more than %d", len(req.GetBlobs()), maxEdits)
	}
	var total int
	blobs := make([]store.Blob, 0, len(req.GetBlobs()))
	out := &agwpv1.UploadBlobsResponse{}
	for _, b := range req.GetBlobs() {
		total += len(b)
		if total > maxContentBytes {
			return nil, connect.NewError(connect.CodeResourceExhausted,
				fmt.Errorf("blobs: more than %d MiB in one request: upload in several", maxContentBytes>>20))
		}
		d := repo.Digest(b)
		blobs = append(blobs, store.Blob{Digest: d, Content: b})
		out.Digests = append(out.Digests, d)
	}
	if err := h.s.store.PutBlobs(ctx, blobs); err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return out, nil
}

// tooLargeForOneAnswer refuses to answer a blob larger than a request may be in one message.
func tooLargeForOneAnswer(digest string, size uint64) error {
	return connect.NewError(connect.CodeResourceExhausted,
		fmt.Errorf("blob %s has %d bytes, more than one answer carries (%d MiB): read it with ReadBlob", digest, size, maxContentBytes>>20))
}

func validateDigests(field string, ds []string) error {
	if len(ds) > maxDigestsPerCall {
		return invalid(field, "has %d digests, more than %d", len(ds), maxDigestsPerCall)
	}
	for i, d := range ds {
		if !digestPattern.MatchString(d) {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "%q is not a digest: use sha256:<64 lowercase hex>", truncate(d, 80))
		}
	}
	return nil
}

func (h repoService) FindMissingBlobs(ctx context.Context, req *agwpv1.FindMissingBlobsRequest) (*agwpv1.FindMissingBlobsResponse, error) {
	if err := validateDigests("digests", req.GetDigests()); err != nil {
		return nil, err
	}
	missing, err := h.s.store.MissingBlobs(ctx, req.GetDigests())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.FindMissingBlobsResponse{Missing: missing}, nil
}

func (h repoService) GetBlob(ctx context.Context, req *agwpv1.GetBlobRequest) (*agwpv1.GetBlobResponse, error) {
	if err := validateDigests("digest", []string{req.GetDigest()}); err != nil {
		return nil, invalid("digest", "%q is not a digest: use sha256:<64 lowercase hex>", truncate(req.GetDigest(), 80))
	}
	if c := callerFrom(ctx); c.principal.Role == store.RoleWorker {
		if err := h.s.workerReads.mayReadBlob(ctx, c.principal.Name, req.GetDigest()); err != nil {
			return nil, err
		}
	}
	sizes, err := h.s.store.BlobSizes(ctx, []string{req.GetDigest()})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	if size, ok := sizes[req.GetDigest()]; ok && size > maxContentBytes {
		return nil, tooLargeForOneAnswer(req.GetDigest(), size)
	}
	b, err := h.s.store.GetBlob(ctx, req.GetDigest())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.GetBlobResponse{Content: b.Content, Digest: b.Digest}, nil
}

// getBlobsMessageBytes is about how much content one GetBlobs message carries.
const getBlobsMessageBytes = 1 << 20

// getBlobsReadBytes bounds the contents GetBlobs reads from the store at once: a call may ask
// for 10,000 blobs of up to 64 MiB each, which must not all be in memory together.
const getBlobsReadBytes = 8 << 20

// blobReads splits digests, in order, into store reads of at most maxBytes of content by their
// sizes; a blob larger than maxBytes is read alone.
func blobReads(digests []string, sizes map[string]uint64, maxBytes uint64) [][]string {
	var reads [][]string
	var size uint64
	start := 0
	for i, d := range digests {
		if i > start && size+sizes[d] > maxBytes {
			reads = append(reads, digests[start:i])
			start, size = i, 0
		}
		size += sizes[d]
	}
	if start < len(digests) {
		reads = append(reads, digests[start:])
	}
	return reads
}

func (h repoService) GetBlobs(ctx context.Context, req *agwpv1.GetBlobsRequest, stream *connect.ServerStream[agwpv1.GetBlobsResponse]) error {
	digests := req.GetDigests()
	if err := validateDigests("digests", digests); err != nil {
		return err
	}
	if c := callerFrom(ctx); c.principal.Role == store.RoleWorker {
		for _, d := range digests {
			if err := h.s.workerReads.mayReadBlob(ctx, c.principal.Name, d); err != nil {
				return err
			}
		}
	}
	sizes, err := h.s.store.BlobSizes(ctx, digests)
	if err != nil {
		return storeError(err, connect.CodeInternal)
	}
	held := len(digests)
	for i, d := range digests {
		size, ok := sizes[d]
		if !ok {
			held = i // what comes before is sent, then not_found names it
			break
		}
		if size > maxContentBytes {
			return tooLargeForOneAnswer(d, size)
		}
	}
	msg := &agwpv1.GetBlobsResponse{}
	size := 0
	send := func() error {
		if len(msg.Blobs) == 0 {
			return nil
		}
		err := stream.Send(msg)
		msg, size = &agwpv1.GetBlobsResponse{}, 0
		return err
	}
	for _, read := range blobReads(digests[:held], sizes, getBlobsReadBytes) {
		blobs, err := h.s.store.GetBlobs(ctx, read)
		if err != nil {
			return storeError(err, connect.CodeInternal)
		}
		byDigest := make(map[string][]byte, len(blobs))
		for _, b := range blobs {
			byDigest[b.Digest] = b.Content
		}
		for _, d := range read {
			content, ok := byDigest[d]
			if !ok {
				return connect.NewError(connect.CodeInternal, fmt.Errorf("blob %s: the store listed it, then did not answer it", d))
			}
			if size > 0 && size+len(content) > getBlobsMessageBytes {
				if err := send(); err != nil {
					return err
				}
			}
			msg.Blobs = append(msg.Blobs, &agwpv1.BlobContent{Digest: d, Content: content})
			size += len(content)
		}
	}
	if err := send(); err != nil {
		return err
	}
	if held < len(digests) {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("blob %s: not found: upload it (UploadBlobs) first", digests[held]))
	}
	return nil
}

func (h repoService) GetTree(ctx context.Context, req *agwpv1.GetTreeRequest) (*agwpv1.GetTreeResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	revision := req.GetRevision()
	if revision == "" {
		r, err := h.s.store.GetRepository(ctx, req.GetRepository())
		if err != nil {
			return nil, storeError(err, connect.CodeInternal)
		}
		revision = r.Mainline
	} else if err := validateID("revision", revision); err != nil {
		return nil, err
	}
	since := req.GetSince()
	if since != "" {
		if err := validateID("since", since); err != nil {
			return nil, err
		}
	}
	if c := callerFrom(ctx); c.principal.Role == store.RoleWorker {
		for _, r := range []string{revision, since} {
			if r == "" {
				continue
			}
			if err := h.s.workerReads.mayReadTree(ctx, c.principal.Name, req.GetRepository(), r); err != nil {
				return nil, err
			}
		}
	}
	if since != "" {
		return h.treeSince(ctx, req.GetRepository(), since, revision)
	}
	rev, err := h.s.store.GetRevision(ctx, req.GetRepository(), revision)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.GetTreeResponse{
		Revision: rev.ID, TreeDigest: rev.TreeDigest, Parent: rev.Parent, ChangeId: rev.ChangeID, Author: rev.Holder,
		GitTree: rev.GitTree, GitCommit: rev.GitCommit, Entries: treeEntries(rev.Tree),
	}, nil
}

// treeSince answers GetTree with since: what changed in revision's tree from since's.
func (h repoService) treeSince(ctx context.Context, repository, since, revision string) (*agwpv1.GetTreeResponse, error) {
	rev, diff, err := h.s.store.DiffRevisions(ctx, repository, since, revision)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.GetTreeResponse{
		Revision: rev.ID, Parent: rev.Parent, ChangeId: rev.ChangeID, Author: rev.Holder, GitTree: rev.GitTree,
		GitCommit: rev.GitCommit, Since: since, Entries: treeEntries(diff.Changed), Removed: diff.Removed,
	}, nil
}

// treeEntries answers entries as the API lists them.
func treeEntries(t repo.Tree) []*agwpv1.TreeEntry {
	out := make([]*agwpv1.TreeEntry, 0, len(t))
	for _, e := range t {
		out = append(out, &agwpv1.TreeEntry{Path: e.Path, Digest: e.Digest, Size: e.Size, Mode: e.GitMode(), GitlinkCommit: e.GitlinkCommit})
	}
	return out
}

// editMode answers the mode of an edit's write: "" (the path's mode in the base), or one of the
// modes a write makes.
func editMode(field string, e *agwpv1.Edit) (string, error) {
	mode := e.GetMode()
	switch e.GetAction().(type) {
	case *agwpv1.Edit_Delete:
		if mode != "" {
			return "", invalid(field+".mode", "%q with delete: a mode goes with a write (content or blob_digest)", truncate(mode, 20))
		}
	case *agwpv1.Edit_GitlinkCommit:
		if mode != "" && mode != repo.ModeGitlink {
			return "", invalid(field+".mode", "%q with gitlink_commit: a submodule stays one (mode %s or empty)", truncate(mode, 20), repo.ModeGitlink)
		}
		return "", nil
	}
	switch mode {
	case "", repo.ModeFile, repo.ModeExecutable, repo.ModeSymlink:
		return mode, nil
	case repo.ModeGitlink:
		return "", invalid(field+".mode", "%s: ag creates no submodule; gitlink_commit moves one the repository has", mode)
	}
	return "", invalid(field+".mode", "%q: want %s (a file), %s (an executable file), %s (a symbolic link, the content its target), or empty to keep the path's mode",
		truncate(mode, 20), repo.ModeFile, repo.ModeExecutable, repo.ModeSymlink)
}

// integrateEdits validates the edits of an Integrate and answers them as file edits, the
// inline contents as blobs, and the sorted edited paths.
func (h repoService) integrateEdits(ctx context.Context, edits []*agwpv1.Edit) ([]repo.FileEdit, []store.Blob, []string, error) {
	if len(edits) == 0 {
		return nil, nil, nil, invalid("edits", "is required: an integrate changes at least one path")
	}
	if len(edits) > maxEdits {
		return nil, nil, nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("edits: %d edits, more than %d in one request", len(edits), maxEdits))
	}
	var (
		out    = make([]repo.FileEdit, 0, len(edits))
		blobs  []store.Blob
		paths  = make([]string, 0, len(edits))
		seen   = make(map[string]bool, len(edits))
		total  int
		lookup []int // the edits that name an uploaded blob, whose sizes the store knows
	)
	for i, e := range edits {
		field := fmt.Sprintf("edits[%d]", i)
		if err := repo.ValidatePath(e.GetPath(), false); err != nil {
			return nil, nil, nil, invalid(field+".path", "%q %v", truncate(e.GetPath(), 200), err)
		}
		if seen[e.GetPath()] {
			return nil, nil, nil, invalid(field+".path", "%q is edited twice in one request", truncate(e.GetPath(), 200))
		}
		seen[e.GetPath()] = true
		paths = append(paths, e.GetPath())
		mode, err := editMode(field, e)
		if err != nil {
			return nil, nil, nil, err
		}
		switch a := e.GetAction().(type) {
		case *agwpv1.Edit_Delete:
			if !a.Delete {
				return nil, nil, nil, invalid(field+".delete", "is false: set blob_digest, content, gitlink_commit, or delete = true")
			}
			out = append(out, repo.FileEdit{Path: e.GetPath(), Delete: true})
		case *agwpv1.Edit_Content:
			total += len(a.Content)
			if total > maxContentBytes {
				return nil, nil, nil, connect.NewError(connect.CodeResourceExhausted,
					fmt.Errorf("%s.content: more than %d MiB of content in one request: upload blobs first and send their digests", field, maxContentBytes>>20))
			}
			if mode == repo.ModeSymlink {
				if err := repo.CheckSymlinkTarget(a.Content); err != nil {
					return nil, nil, nil, invalid(field+".content", "%v", err)
				}
			}
			d := repo.Digest(a.Content)
			blobs = append(blobs, store.Blob{Digest: d, Content: a.Content})
			out = append(out, repo.FileEdit{Path: e.GetPath(), Digest: d, Size: uint64(len(a.Content)), Mode: mode})
		case *agwpv1.Edit_BlobDigest:
			if !digestPattern.MatchString(a.BlobDigest) {
				return nil, nil, nil, invalid(field+".blob_digest", "%q is not a digest: use sha256:<64 lowercase hex>", truncate(a.BlobDigest, 80))
			}
			lookup = append(lookup, len(out))
			out = append(out, repo.FileEdit{Path: e.GetPath(), Digest: a.BlobDigest, Mode: mode})
		case *agwpv1.Edit_GitlinkCommit:
			commit, err := store.ParseGitID(a.GitlinkCommit)
			if err != nil || commit.IsZero() {
				return nil, nil, nil, invalid(field+".gitlink_commit", "%q is not a commit id: use 40 lowercase hex, not all zeros", truncate(a.GitlinkCommit, 80))
			}
			out = append(out, repo.FileEdit{Path: e.GetPath(), GitlinkCommit: a.GitlinkCommit})
		default:
			return nil, nil, nil, invalid(field, "needs one of blob_digest, content, gitlink_commit or delete")
		}
	}
	if len(lookup) > 0 {
		digests := make([]string, len(lookup))
		for j, i := range lookup {
			digests[j] = out[i].Digest
		}
		sizes, err := h.s.store.BlobSizes(ctx, digests)
		if err != nil {
			return nil, nil, nil, storeError(err, connect.CodeInternal)
		}
		for _, i := range lookup {
			size, ok := sizes[out[i].Digest]
			if !ok {
				return nil, nil, nil, connect.NewError(connect.CodeFailedPrecondition,
					fmt.Errorf("blob %s of %s is not on the server: upload it (UploadBlobs) before integrating", out[i].Digest, out[i].Path))
			}
			out[i].Size = size
			if out[i].Mode == repo.ModeSymlink && (size == 0 || size > repo.MaxSymlinkTarget) {
				return nil, nil, nil, invalid(fmt.Sprintf("edits[%d].blob_digest", i),
					"blob %s is %d bytes: a symbolic link's target is 1 to %d bytes", out[i].Digest, size, repo.MaxSymlinkTarget)
			}
		}
	}
	sort.Strings(paths)
	return out, blobs, paths, nil
}

// editField names the edit of path among edits, "edits[i]", or "edits" when none is: an edit
// under a submodule is refused naming the submodule.
func editField(edits []*agwpv1.Edit, path string) string {
	for i, e := range edits {
		if e.GetPath() == path {
			return fmt.Sprintf("edits[%d]", i)
		}
	}
	return "edits"
}

func (h repoService) Integrate(ctx context.Context, req *agwpv1.IntegrateRequest) (*agwpv1.IntegrateResponse, error) {
	return h.integrate(ctx, req, "")
}

// integrate is Integrate, for a change made by `git push` of pushedCommit too ("" for none):
// a push is an Integrate of the pushed tree, by the same rules.
func (h repoService) integrate(ctx context.Context, req *agwpv1.IntegrateRequest, pushedCommit string) (*agwpv1.IntegrateResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	if err := validateID("base_revision", req.GetBaseRevision()); err != nil {
		return nil, err
	}
	if err := validateLabel("holder", req.GetHolder()); err != nil {
		return nil, err
	}
	if err := maxBytes("message", req.GetMessage(), maxMessageBytes); err != nil {
		return nil, err
	}
	if n := len(req.GetFencingTokens()); n == 0 || n > maxFencingTokens {
		return nil, invalid("fencing_tokens", "has %d tokens: send the tokens of the leases covering the edited paths (1 to %d)", n, maxFencingTokens)
	}
	if err := validateTaskClaim(req.GetTaskId(), req.GetTaskClaimNumber()); err != nil {
		return nil, err
	}
	edits, blobs, paths, err := h.integrateEdits(ctx, req.GetEdits())
	if err != nil {
		return nil, err
	}
	holder := callerFrom(ctx).holder(req.GetHolder())
	change, err := h.s.store.Integrate(ctx, store.IntegrateParams{
		Repository:      req.GetRepository(),
		BaseRevision:    req.GetBaseRevision(),
		Holder:          holder,
		FencingTokens:   req.GetFencingTokens(),
		Paths:           paths,
		Message:         req.GetMessage(),
		Blobs:           blobs,
		Edits:           edits,
		PushedCommit:    pushedCommit,
		TaskID:          req.GetTaskId(),
		TaskClaimNumber: req.GetTaskClaimNumber(),
	})
	var taskRefused *store.TaskStateError
	var invalidEdit *repo.InvalidEditError
	switch {
	case errors.As(err, &invalidEdit):
		return nil, invalid(editField(req.GetEdits(), invalidEdit.Path), "%s %s", truncate(invalidEdit.Path, 200), invalidEdit.Reason)
	case repo.DoesNotApply(err):
		h.s.metrics.refusal("Integrate", "conflict")
		return nil, connect.NewError(connect.CodeAborted, err)
	case errors.As(err, &taskRefused):
		h.s.metrics.refusal("Integrate", "task")
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, store.ErrFailedPrecondition):
		h.s.metrics.refusal("Integrate", "lease")
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case err != nil:
		return nil, storeError(err, connect.CodeInternal)
	}
	if change.State == store.ChangeQueued {
		h.s.log.Info("change queued for validation", "change", change.ID, "repository", change.Repository, "author", holder,
			"paths", len(paths))
		h.s.gate.Kick(change.Repository)
		// The answer is the change as queued, with its place in the queue (0 when the gate has
		// already taken it).
		out := changeProto(change)
		if c, err := h.s.store.GetChange(ctx, change.ID); err == nil && c.State == store.ChangeQueued {
			out.QueuePosition = uint32(c.QueuePosition)
		}
		out.ProtectedPaths = gate.ProtectedTouched(h.protectedPaths(ctx, change.Repository), change.Paths)
		return &agwpv1.IntegrateResponse{Change: out}, nil
	} else {
		h.s.landed(change)
		h.s.log.Info("change integrated", "change", change.ID, "repository", change.Repository, "author", holder,
			"revision", change.IntegratedRevision, "paths", len(paths))
	}
	return &agwpv1.IntegrateResponse{Change: changeProto(change)}, nil
}

func (h repoService) GetChange(ctx context.Context, req *agwpv1.GetChangeRequest) (*agwpv1.GetChangeResponse, error) {
	if err := validateID("change_id", req.GetChangeId()); err != nil {
		return nil, err
	}
	wait, err := duration("wait", req.GetWait(), 0, 0, maxChangeWait)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		changed := h.s.gate.Changed()
		c, err := h.s.store.GetChange(ctx, req.GetChangeId())
		if err != nil {
			return nil, storeError(err, connect.CodeInternal)
		}
		remaining := time.Until(deadline)
		if c.State.Terminal() || remaining <= 0 {
			return &agwpv1.GetChangeResponse{Change: h.changeWithProgress(ctx, c)}, nil
		}
		if !h.s.await(ctx, changed, min(remaining, h.s.pollInterval)) {
			return &agwpv1.GetChangeResponse{Change: h.changeWithProgress(ctx, c)}, nil
		}
	}
}

func (h repoService) ListChanges(ctx context.Context, req *agwpv1.ListChangesRequest) (*agwpv1.ListChangesResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	limit, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	cs, next, err := h.s.store.ListChanges(ctx, store.ListChangesParams{Repository: req.GetRepository(), Limit: limit,
		PageToken: req.GetPageToken(), AwaitingApproval: req.GetAwaitingApproval()})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.ListChangesResponse{NextPageToken: next}
	protected := h.protectedPaths(ctx, req.GetRepository())
	for _, c := range cs {
		pc := changeProto(c)
		pc.ProtectedPaths = gate.ProtectedTouched(protected, c.Paths)
		out.Changes = append(out.Changes, pc)
	}
	return out, nil
}

// protectedPaths answers what the policy of repository protects now, nil when it cannot tell.
func (h repoService) protectedPaths(ctx context.Context, repository string) []string {
	r, err := h.s.store.GetRepository(ctx, repository)
	if err != nil {
		return nil
	}
	p, _, err := gate.ParsePolicy(r.Validation)
	if err != nil {
		return nil
	}
	return p.Protected()
}

// ApproveChange records a reviewer's approval of a change to protected paths; one that waited
// for it goes back to the queue.
func (h repoService) ApproveChange(ctx context.Context, req *agwpv1.ApproveChangeRequest) (*agwpv1.ApproveChangeResponse, error) {
	if err := validateID("change_id", req.GetChangeId()); err != nil {
		return nil, err
	}
	c, err := h.s.store.ApproveChange(ctx, req.GetChangeId(), callerFrom(ctx).principal.Name)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	h.s.log.Info("change approved", "change", c.ID, "repository", c.Repository, "by", c.ApprovedBy, "state", string(c.State))
	h.s.gate.Kick(c.Repository)
	return &agwpv1.ApproveChangeResponse{Change: h.changeWithProgress(ctx, c)}, nil
}

func (h repoService) WatchChange(ctx context.Context, req *agwpv1.WatchChangeRequest, stream *connect.ServerStream[agwpv1.WatchChangeResponse]) error {
	if err := validateID("change_id", req.GetChangeId()); err != nil {
		return err
	}
	// Each transition is sent once, and while VALIDATING each new progress line of the
	// worker too.
	var last *agwpv1.Change
	for {
		changed := h.s.gate.Changed()
		c, err := h.s.store.GetChange(ctx, req.GetChangeId())
		if err != nil {
			return storeError(err, connect.CodeInternal)
		}
		out := h.changeWithProgress(ctx, c)
		if last == nil || out.GetState() != last.GetState() || out.GetProgress() != last.GetProgress() ||
			out.GetQueuePosition() != last.GetQueuePosition() || out.GetCandidateRevision() != last.GetCandidateRevision() ||
			out.GetCandidate().GetId() != last.GetCandidate().GetId() || out.GetCandidate().GetState() != last.GetCandidate().GetState() ||
			out.GetCandidate().GetPosition() != last.GetCandidate().GetPosition() {
			if err := stream.Send(&agwpv1.WatchChangeResponse{Change: out}); err != nil {
				return err
			}
			last = out
		}
		if c.State.Terminal() {
			return nil
		}
		if !h.s.await(ctx, changed, h.s.pollInterval) {
			return nil
		}
	}
}
