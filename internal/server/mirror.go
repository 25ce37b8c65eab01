package server

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"strings"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/prometheus/client_golang/prometheus"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/mirror"
	"github.com/ag-coord/ag/internal/store"
)

// maxCredentialBytes bounds a forge mirror's credential.
const maxCredentialBytes = 4 << 10

// branchPattern is what a mirror's branch may be: a plain branch name.
var branchPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(/[A-Za-z0-9][A-Za-z0-9._-]{0,99}){0,4}$`)

var mirrorStates = map[store.MirrorState]agwpv1.MirrorState{
	store.MirrorPending:  agwpv1.MirrorState_MIRROR_STATE_PENDING,
	store.MirrorCurrent:  agwpv1.MirrorState_MIRROR_STATE_CURRENT,
	store.MirrorDiverged: agwpv1.MirrorState_MIRROR_STATE_DIVERGED,
	store.MirrorFailing:  agwpv1.MirrorState_MIRROR_STATE_FAILING,
}

// mirrorProto answers a mirror as the API shows it: never its credential.
func mirrorProto(m store.Mirror) *agwpv1.Mirror {
	return &agwpv1.Mirror{Url: m.URL, Branch: m.Branch, State: mirrorStates[m.State], PushedCommit: m.PushedCommit,
		LastError: m.LastError, UpdatedAt: timestamp(m.UpdatedAt), HasCredential: len(m.Credential) > 0}
}

// repositoryWithMirror answers r with its mirror, if it has one.
func (h repoService) repositoryWithMirror(ctx context.Context, r store.Repository) (*agwpv1.Repository, error) {
	out := repositoryProto(r)
	m, err := h.s.store.GetMirror(ctx, r.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, storeError(err, connect.CodeInternal)
	default:
		out.Mirror = mirrorProto(m)
	}
	return out, nil
}

func (h repoService) SetMirror(ctx context.Context, req *agwpv1.SetMirrorRequest) (*agwpv1.SetMirrorResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	branch := req.GetBranch()
	if branch == "" {
		branch = "main"
	}
	if req.GetUrl() != "" {
		if err := validateMirrorURL(req.GetUrl()); err != nil {
			return nil, err
		}
		if !branchPattern.MatchString(branch) || strings.Contains(branch, "..") || strings.HasSuffix(branch, ".lock") {
			return nil, invalid("branch", "%q is not a branch name (letters, digits, '.', '_', '-', and '/' between parts)", truncate(branch, 100))
		}
	}
	if len(req.GetCredential()) > maxCredentialBytes {
		return nil, invalid("credential", "has %d bytes, more than %d", len(req.GetCredential()), maxCredentialBytes)
	}
	if req.GetUrl() == "" && req.GetCredential() != "" {
		return nil, invalid("credential", "is given without a url: a mirror is removed with an empty url alone")
	}
	_, err := h.s.store.SetMirror(ctx, store.SetMirrorParams{Repository: req.GetRepository(), URL: req.GetUrl(), Branch: branch,
		Credential: []byte(strings.TrimSpace(req.GetCredential()))})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	h.s.mirrors.Kick(req.GetRepository())
	r, err := h.s.store.GetRepository(ctx, req.GetRepository())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out, err := h.repositoryWithMirror(ctx, r)
	if err != nil {
		return nil, err
	}
	return &agwpv1.SetMirrorResponse{Repository: out}, nil
}

// validateMirrorURL refuses a mirror URL the server should not push to or would have to keep a
// secret in: only http(s), and the credential goes apart.
func validateMirrorURL(raw string) error {
	if len(raw) > 2048 {
		return invalid("url", "has %d bytes, more than 2048", len(raw))
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return invalid("url", "%q is not an http:// or https:// URL of a repository", truncate(raw, 200))
	}
	if u.User != nil {
		return invalid("url", "holds a user or password: give the credential apart (ag repo set-mirror --credential-file), so that the URL can be shown")
	}
	if u.Fragment != "" || u.RawQuery != "" {
		return invalid("url", "%q has a query or a fragment: name the repository alone", truncate(raw, 200))
	}
	return nil
}

// newMirrors answers the server's forge mirrors, reading the store's git objects, with their
// state as a metric.
func (s *Server) newMirrors() *mirror.Mirrors {
	m := mirror.New(s.store, func(ctx context.Context) storer.EncodedObjectStorer {
		return newGitObjects(ctx, s.store, s.log)
	}, s.log, s.cfg.MirrorSweep)
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ag_mirror_state",
		Help: "1 for the state of each repository's forge mirror as this replica last pushed it (pending, current, diverged, failing), 0 for the others.",
	}, []string{"repository", "state"})
	s.metrics.registry.MustRegister(state)
	m.OnState = func(repository string, st store.MirrorState) {
		for each := range mirrorStates {
			v := 0.0
			if each == st {
				v = 1
			}
			state.WithLabelValues(repository, string(each)).Set(v)
		}
	}
	return m
}

// landed tells the mirrors that a change landed, or a change settled otherwise (it is a no-op
// for a repository without a mirror).
func (s *Server) landed(c store.Change) {
	if c.State == store.ChangeIntegrated {
		s.mirrors.Kick(c.Repository)
	}
}
