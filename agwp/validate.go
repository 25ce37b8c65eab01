// Package agwp holds the parts of the AGWP v1 contract that are not protobuf messages: the kind
// and payload of the validate jobs the server's integration queue enqueues and workers run. The
// server and the client SDK both import it, so that neither imports the other.
package agwp

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
)

// KindValidate is the kind of the jobs the integration queue enqueues: run a repository's
// validation command on one candidate tree and attest the outcome.
const KindValidate = "validate"

// ValidatePayload is the payload of a validate job. It names the candidate tree by its git tree
// id, its tree digest, or both (jobs enqueued before git tree ids name the digest only); the
// attestation's subject must carry what it names.
type ValidatePayload struct {
	Repository        string            `json:"repository"`
	Change            string            `json:"change"`
	CandidateRevision string            `json:"candidate_revision"`
	TreeDigest        string            `json:"tree_digest,omitempty"` // "sha256:<hex>" of ag's flat tree encoding, or ""
	GitTree           string            `json:"git_tree,omitempty"`    // the tree's git id, 40 lowercase hex, or ""
	Command           []string          `json:"command"`
	Timeout           string            `json:"timeout"` // a Go duration, "10m0s"
	Env               map[string]string `json:"env,omitempty"`
	// Lane is the policy lane the candidate validates, "" for the whole tree (ADR-0024). A
	// lane's candidate tree holds no other lane's files.
	Lane string `json:"lane,omitempty"`
	// Network is what the policy asks: "none" for no network, "egress" for the worker's egress
	// proxy; "" in jobs enqueued before policies had a network (the worker's own network was
	// then the default).
	Network string `json:"network,omitempty"`
	// Isolation is the evidence the policy asks of a pass: "sandbox", or "none" for any run;
	// "" in jobs enqueued before, which took any.
	Isolation string `json:"isolation,omitempty"`
	// Limits are the policy's bounds of one run, each 0 (or absent) for the worker's own; a
	// worker holds a run to the lower of these and its own.
	Limits *PayloadLimits `json:"limits,omitempty"`
	// Protected names the policy's protected paths and the mainline revision whose copy of them
	// the worker validates with, in place of the candidate's (ADR-0031); nil: none.
	Protected *ProtectedFrom `json:"protected,omitempty"`
	// Preset names the validation recipe whose prepare phase the worker runs first, filling
	// its caches for the repository, which the command then sees read-only; "" for none. A
	// worker that does not know it runs the command without.
	Preset string `json:"preset,omitempty"`
}

// The presets a policy may name (docs/validation.md, "Presets").
const (
	// PresetGo: the prepare phase downloads the modules and compiles the packages and their
	// tests into the repository's caches.
	PresetGo = "go"
	// PresetNode: the prepare phase installs the packages of the tree's package-lock.json
	// (`npm ci --ignore-scripts`) into a node_modules of the worker's, keyed by the manifests.
	PresetNode = "node"
	// PresetPython: the prepare phase installs the wheels its requirements files name (wheels
	// only: nothing is built) into a directory of the worker's, keyed by those files.
	PresetPython = "python"
)

// ProtectedFrom is where a validation takes its protected paths from: the entries of Revision
// under Paths (lease paths) replace the candidate's; a path under which Revision holds nothing
// keeps the candidate's.
type ProtectedFrom struct {
	Revision string   `json:"revision"`
	Paths    []string `json:"paths"`
}

// PayloadLimits are the policy's limits as a validate payload carries them.
type PayloadLimits struct {
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	Pids        uint32 `json:"pids,omitempty"`
	DiskBytes   uint64 `json:"disk_bytes,omitempty"`
}

var (
	treeDigestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	gitTreePattern    = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// TimeoutDuration answers the payload's timeout.
func (p ValidatePayload) TimeoutDuration() (time.Duration, error) {
	d, err := time.ParseDuration(p.Timeout)
	if err != nil {
		return 0, fmt.Errorf("validate payload: timeout %q: %w", p.Timeout, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("validate payload: timeout %q is not positive", p.Timeout)
	}
	return d, nil
}

// ParseValidatePayload reads a validate job's payload and checks that it names everything a
// worker needs.
func ParseValidatePayload(payload *structpb.Struct) (ValidatePayload, error) {
	if payload == nil {
		return ValidatePayload{}, errors.New("validate payload: missing")
	}
	data, err := payload.MarshalJSON()
	if err != nil {
		return ValidatePayload{}, fmt.Errorf("validate payload: %w", err)
	}
	return ParseValidatePayloadJSON(data)
}

// ParseValidatePayloadJSON is ParseValidatePayload for the payload's JSON.
func ParseValidatePayloadJSON(data []byte) (ValidatePayload, error) {
	var p ValidatePayload
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("validate payload: %w", err)
	}
	switch {
	case p.Repository == "" || p.CandidateRevision == "":
		return p, errors.New("validate payload: repository and candidate_revision are required")
	case p.TreeDigest == "" && p.GitTree == "":
		return p, errors.New("validate payload: git_tree or tree_digest is required")
	case p.TreeDigest != "" && !treeDigestPattern.MatchString(p.TreeDigest):
		return p, fmt.Errorf("validate payload: tree_digest %q is not sha256:<64 lowercase hex>", p.TreeDigest)
	case p.GitTree != "" && !gitTreePattern.MatchString(p.GitTree):
		return p, fmt.Errorf("validate payload: git_tree %q is not a git tree id: 40 lowercase hex", p.GitTree)
	case len(p.Command) == 0:
		return p, errors.New("validate payload: command is empty")
	case p.Network != "" && p.Network != "none" && p.Network != "egress":
		// A network this worker does not know is one it cannot keep: never run it in another.
		return p, fmt.Errorf("validate payload: network %q is none of \"none\" and \"egress\": this worker is older than the server", p.Network)
	case p.Isolation != "" && p.Isolation != "sandbox" && p.Isolation != "none":
		return p, fmt.Errorf("validate payload: isolation %q is none of \"sandbox\" and \"none\"", p.Isolation)
	case p.Protected != nil && (p.Protected.Revision == "" || len(p.Protected.Paths) == 0):
		return p, errors.New("validate payload: protected names a revision and its paths")
	}
	if _, err := p.TimeoutDuration(); err != nil {
		return p, err
	}
	return p, nil
}
