package attest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	testresult "github.com/in-toto/attestation/go/predicates/test_result/v0"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// PredicateTypeTestResult is the in-toto predicate type of a validation's outcome.
const PredicateTypeTestResult = "https://in-toto.io/attestation/test-result/v0.1"

// The results a validation attests.
const (
	ResultPassed = "PASSED"
	ResultFailed = "FAILED"
)

// How the command of a validation was isolated from its worker, as the worker attests it.
// An attestation without the field predates it: its isolation is unknown.
const (
	// IsolationBubblewrap: the command ran in a bubblewrap sandbox that holds none of the
	// worker's secrets (docs/validation.md says what it sees).
	IsolationBubblewrap = "bubblewrap"
	// IsolationNone: the command ran with the worker's own rights, which include signing
	// any result (ag-worker --unsafe-no-sandbox).
	IsolationNone = "none"
)

// The network a validation's command had, as the worker attests it. An attestation without the
// field predates it: its command may have had the worker's network.
const (
	// NetworkNone: a network namespace of its own, with only a loopback.
	NetworkNone = "none"
	// NetworkEgress: a loopback of its own and the worker's egress proxy, which opens
	// connections only to the host names the worker's operator allows, never to loopback,
	// private, link-local or the worker's own addresses.
	NetworkEgress = "egress"
	// NetworkShared: the worker's own network (ag-worker --sandbox-network shared, or no
	// sandbox at all): everything the worker's machine reaches, its loopback included.
	NetworkShared = "shared"
)

// Validation is what a worker attests about one run of a repository's validation command on
// one candidate tree. It travels as an in-toto Statement v1 whose predicate is exactly the
// spec's test-result: the subject is the tree ("<repository>@<revision>"; its digests the git
// tree id as gitTree and the tree digest as sha256, at least one of them); the predicate holds
// the result, the url "ag:job/<id>" and two configuration entries, "command" (argv and timeout,
// its JSON content) and "run", whose annotations carry what ties the run to its claim (job id,
// claim number, worker, times, exit code, log digest, reason, isolation). Attestations signed
// before had those fields in the predicate itself, beside the spec's; ParseStatement reads both
// (docs/validation.md). Those signed before git tree ids name the tree digest alone.
type Validation struct {
	Repository  string
	Revision    string
	TreeDigest  string // "sha256:<hex>" of ag's flat tree encoding (repo.Tree.Digest), or ""
	GitTree     string // the git tree id, 40 lowercase hex (`git rev-parse <commit>^{tree}`), or ""
	Result      string // ResultPassed or ResultFailed
	Command     []string
	Timeout     time.Duration
	JobID       string
	ClaimNumber uint32
	Worker      string // "<principal>|<label>"
	StartedAt   time.Time
	FinishedAt  time.Time
	ExitCode    int    // -1 when the command was killed or did not exit by itself
	LogDigest   string // "sha256:<hex>" of the whole log
	Reason      string // why it failed, when it did not exit non-zero by itself ("timed out after 5m0s")
	Isolation   string // IsolationBubblewrap or IsolationNone; empty in attestations that predate it
	Network     string // NetworkNone, NetworkEgress or NetworkShared; empty in attestations that predate it
	// Protected, when the policy protects paths (ADR-0031), says whose copy of them the run had:
	// the mainline revision's, in place of the candidate's. The subject stays the candidate.
	Protected *Protected
}

// Protected is where a validation took its protected paths from: Revision's entries under
// Paths (lease paths) replaced the candidate's, except under a path where Revision has none.
type Protected struct {
	Revision string   `json:"revision"`
	Paths    []string `json:"paths"`
}

// Passed reports whether the validation attests a pass.
func (v Validation) Passed() bool { return v.Result == ResultPassed }

// Subject answers the in-toto subject name of the attested tree.
func (v Validation) Subject() string { return v.Repository + "@" + v.Revision }

// The names of the predicate's configuration entries.
const (
	configCommand   = "command"   // content: commandConfig
	configRun       = "run"       // annotations: runFields
	configProtected = "protected" // content: Protected
)

// runFields are the annotations of the "run" configuration entry: what ties the run to its
// job and claim. Attestations signed before carry them in the predicate itself. They are part
// of the signed payload, so a verifier reads exactly what the worker signed.
type runFields struct {
	JobID       string `json:"jobId"`
	ClaimNumber uint32 `json:"claimNumber"`
	Worker      string `json:"worker"`
	StartedOn   string `json:"startedOn"`
	FinishedOn  string `json:"finishedOn"`
	ExitCode    int    `json:"exitCode"`
	LogDigest   string `json:"logDigest"`
	Reason      string `json:"reason,omitempty"`
	Isolation   string `json:"isolation,omitempty"`
	Network     string `json:"network,omitempty"`
}

// commandConfig is the content of the predicate's "command" configuration entry.
type commandConfig struct {
	Argv    []string `json:"argv"`
	Timeout string   `json:"timeout,omitempty"`
}

// sha256Hex is a sha256 digest in the lowercase hex that ag's digests ("sha256:<hex>") use.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// gitTreeHex is a git tree id of the SHA-1 object format, in the lowercase hex git prints.
var gitTreeHex = regexp.MustCompile(`^[0-9a-f]{40}$`)

// The names of the subject's digests, in-toto's for a sha256 and for a git tree.
const (
	digestSHA256  = "sha256"
	digestGitTree = "gitTree"
)

// subjectDigest answers the digest set of v's subject: its git tree id, its tree digest, or
// both; it refuses a validation that names neither, or either in another form.
func subjectDigest(v Validation) (map[string]string, error) {
	digest := make(map[string]string, 2)
	if v.TreeDigest != "" {
		hexDigest, ok := strings.CutPrefix(v.TreeDigest, "sha256:")
		if !ok || !sha256Hex.MatchString(hexDigest) {
			return nil, fmt.Errorf("tree digest %q is not sha256:<64 lowercase hex>", v.TreeDigest)
		}
		digest[digestSHA256] = hexDigest
	}
	if v.GitTree != "" {
		if !gitTreeHex.MatchString(v.GitTree) {
			return nil, fmt.Errorf("git tree %q is not a git tree id: 40 lowercase hex", v.GitTree)
		}
		digest[digestGitTree] = v.GitTree
	}
	if len(digest) == 0 {
		return nil, errors.New("a validation names its tree: a git tree id, a tree digest, or both")
	}
	return digest, nil
}

// StatementJSON encodes v as an in-toto Statement v1 in JSON. It refuses a validation that
// ParseStatement would not read back.
func StatementJSON(v Validation) ([]byte, error) {
	digest, err := subjectDigest(v)
	if err != nil {
		return nil, err
	}
	if v.Result != ResultPassed && v.Result != ResultFailed {
		return nil, fmt.Errorf("result %q is neither %s nor %s", v.Result, ResultPassed, ResultFailed)
	}
	switch {
	case v.Repository == "" || v.Revision == "" || strings.Contains(v.Repository, "@"):
		return nil, fmt.Errorf("subject %q: need a repository (without '@') and a revision", v.Subject())
	case v.JobID == "" || v.ClaimNumber == 0:
		return nil, errors.New("a validation names its job id and claim number")
	case len(v.Command) == 0:
		return nil, errors.New("a validation names its command")
	}
	cmd := commandConfig{Argv: v.Command}
	if v.Timeout > 0 {
		cmd.Timeout = v.Timeout.String()
	}
	cmdJSON, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	run, err := toStruct(runFields{
		JobID:       v.JobID,
		ClaimNumber: v.ClaimNumber,
		Worker:      v.Worker,
		StartedOn:   v.StartedAt.UTC().Format(time.RFC3339Nano),
		FinishedOn:  v.FinishedAt.UTC().Format(time.RFC3339Nano),
		ExitCode:    v.ExitCode,
		LogDigest:   v.LogDigest,
		Reason:      v.Reason,
		Isolation:   v.Isolation,
		Network:     v.Network,
	})
	if err != nil {
		return nil, err
	}
	config := []*intoto.ResourceDescriptor{
		{Name: configCommand, MediaType: "application/json", Content: cmdJSON},
		{Name: configRun, Annotations: run},
	}
	if v.Protected != nil {
		if v.Protected.Revision == "" || len(v.Protected.Paths) == 0 {
			return nil, errors.New("a validation's protected paths name their revision and paths")
		}
		protJSON, err := json.Marshal(v.Protected)
		if err != nil {
			return nil, err
		}
		config = append(config, &intoto.ResourceDescriptor{Name: configProtected, MediaType: "application/json", Content: protJSON})
	}
	predicate, err := messageStruct(&testresult.TestResult{
		Result:        v.Result,
		Configuration: config,
		Url:           "ag:job/" + v.JobID,
	})
	if err != nil {
		return nil, err
	}
	st := &intoto.Statement{
		Type:          intoto.StatementTypeUri,
		Subject:       []*intoto.ResourceDescriptor{{Name: v.Subject(), Digest: digest}},
		PredicateType: PredicateTypeTestResult,
		Predicate:     predicate,
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("in-toto statement: %w", err)
	}
	return protojson.Marshal(st)
}

// messageStruct answers m's protobuf JSON as a Struct.
func messageStruct(m proto.Message) (*structpb.Struct, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		return nil, err
	}
	return s, nil
}

// toStruct answers v's JSON as a Struct.
func toStruct(v any) (*structpb.Struct, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		return nil, err
	}
	return s, nil
}

// ErrNotAValidation: the payload is not an in-toto test-result statement about one tree with
// the fields a validation needs.
var ErrNotAValidation = errors.New("not a validation attestation")

// ParseStatement decodes the in-toto Statement of a validation.
func ParseStatement(payload []byte) (Validation, error) {
	st := &intoto.Statement{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(payload, st); err != nil {
		return Validation{}, fmt.Errorf("%w: %v", ErrNotAValidation, err)
	}
	if err := st.Validate(); err != nil {
		return Validation{}, fmt.Errorf("%w: %v", ErrNotAValidation, err)
	}
	// Validate also lets the legacy v0.1 statement type through.
	if st.GetType() != intoto.StatementTypeUri {
		return Validation{}, fmt.Errorf("%w: statement type %q, want %q", ErrNotAValidation, st.GetType(), intoto.StatementTypeUri)
	}
	if st.GetPredicateType() != PredicateTypeTestResult {
		return Validation{}, fmt.Errorf("%w: predicate type %q, want %q", ErrNotAValidation, st.GetPredicateType(), PredicateTypeTestResult)
	}
	if len(st.GetSubject()) != 1 {
		return Validation{}, fmt.Errorf("%w: %d subjects, want the one candidate tree", ErrNotAValidation, len(st.GetSubject()))
	}
	subject := st.GetSubject()[0]
	var v Validation
	var err error
	if v.TreeDigest, v.GitTree, err = parseSubjectDigest(subject.GetDigest()); err != nil {
		return Validation{}, err
	}
	// Repository names cannot hold '@'; revision ids are opaque, so split at the first one.
	repository, revision, ok := strings.Cut(subject.GetName(), "@")
	if !ok || repository == "" || revision == "" {
		return Validation{}, fmt.Errorf("%w: subject name %q is not <repository>@<revision>", ErrNotAValidation, subject.GetName())
	}
	v.Repository, v.Revision = repository, revision

	tr, run, err := parsePredicate(st.GetPredicate())
	if err != nil {
		return Validation{}, err
	}
	v.Result = tr.GetResult()
	if v.Result != ResultPassed && v.Result != ResultFailed {
		return Validation{}, fmt.Errorf("%w: result %q is neither %s nor %s", ErrNotAValidation, v.Result, ResultPassed, ResultFailed)
	}
	commands, protected := 0, 0
	for _, c := range tr.GetConfiguration() {
		if c.GetName() == configProtected {
			if protected++; protected > 1 {
				return Validation{}, fmt.Errorf("%w: more than one protected configuration", ErrNotAValidation)
			}
			var p Protected
			if err := json.Unmarshal(c.GetContent(), &p); err != nil {
				return Validation{}, fmt.Errorf("%w: protected configuration: %v", ErrNotAValidation, err)
			}
			if p.Revision == "" || len(p.Paths) == 0 {
				return Validation{}, fmt.Errorf("%w: the protected configuration names no revision or no paths", ErrNotAValidation)
			}
			v.Protected = &p
			continue
		}
		if c.GetName() != configCommand {
			continue
		}
		if commands++; commands > 1 {
			return Validation{}, fmt.Errorf("%w: more than one command configuration", ErrNotAValidation)
		}
		var cmd commandConfig
		if err := json.Unmarshal(c.GetContent(), &cmd); err != nil {
			return Validation{}, fmt.Errorf("%w: command configuration: %v", ErrNotAValidation, err)
		}
		v.Command = cmd.Argv
		if cmd.Timeout != "" {
			if v.Timeout, err = time.ParseDuration(cmd.Timeout); err != nil {
				return Validation{}, fmt.Errorf("%w: command timeout: %v", ErrNotAValidation, err)
			}
		}
	}
	if len(v.Command) == 0 {
		return Validation{}, fmt.Errorf("%w: the predicate names no command", ErrNotAValidation)
	}
	if run.JobID == "" || run.ClaimNumber == 0 {
		return Validation{}, fmt.Errorf("%w: the predicate names no jobId and claimNumber", ErrNotAValidation)
	}
	v.JobID, v.ClaimNumber, v.Worker = run.JobID, run.ClaimNumber, run.Worker
	v.ExitCode, v.LogDigest, v.Reason, v.Isolation, v.Network = run.ExitCode, run.LogDigest, run.Reason, run.Isolation, run.Network
	switch v.Network {
	case "", NetworkNone, NetworkEgress, NetworkShared:
	default:
		return Validation{}, fmt.Errorf("%w: network %q is none of %q, %q, %q", ErrNotAValidation, v.Network, NetworkNone, NetworkEgress, NetworkShared)
	}
	switch v.Isolation {
	case "", IsolationBubblewrap, IsolationNone:
	default:
		// Printed to whoever verifies: a value of the signer's own wording must not read as
		// isolated.
		return Validation{}, fmt.Errorf("%w: isolation %q is none of %q, %q", ErrNotAValidation, v.Isolation, IsolationBubblewrap, IsolationNone)
	}
	if v.StartedAt, err = parseTime(run.StartedOn); err != nil {
		return Validation{}, fmt.Errorf("%w: startedOn: %v", ErrNotAValidation, err)
	}
	if v.FinishedAt, err = parseTime(run.FinishedOn); err != nil {
		return Validation{}, fmt.Errorf("%w: finishedOn: %v", ErrNotAValidation, err)
	}
	return v, nil
}

// parseSubjectDigest reads the subject's digest set: the tree digest ("sha256:<hex>") from
// sha256 and the git tree id from gitTree, each in lowercase hex of its length, at least one
// of them. Attestations signed before the git tree id have sha256 only. A name that is one of
// these but for its case is refused, as a reader of the exact names would not see it.
func parseSubjectDigest(digest map[string]string) (treeDigest, gitTree string, err error) {
	for name := range digest {
		for _, known := range []string{digestSHA256, digestGitTree} {
			if name != known && strings.EqualFold(name, known) {
				return "", "", fmt.Errorf("%w: the subject's digest %q is %q but for its case", ErrNotAValidation, name, known)
			}
		}
	}
	sha, hasSHA := digest[digestSHA256]
	gitTree, hasGitTree := digest[digestGitTree]
	switch {
	case !hasSHA && !hasGitTree:
		return "", "", fmt.Errorf("%w: the subject has neither a %s nor a %s digest", ErrNotAValidation, digestGitTree, digestSHA256)
	case hasSHA && !sha256Hex.MatchString(sha):
		return "", "", fmt.Errorf("%w: the subject's %s digest is not 64 lowercase hex", ErrNotAValidation, digestSHA256)
	case hasGitTree && !gitTreeHex.MatchString(gitTree):
		return "", "", fmt.Errorf("%w: the subject's %s digest is not a git tree id: 40 lowercase hex", ErrNotAValidation, digestGitTree)
	}
	if hasSHA {
		treeDigest = "sha256:" + sha
	}
	return treeDigest, gitTree, nil
}

// parsePredicate reads a test-result predicate and the fields of its run. A predicate that is
// exactly the spec's test-result (unknown fields refused) has them in the annotations of its
// one "run" configuration entry. One with ag's fields beside the spec's is an attestation
// signed before: its run fields are read from the predicate itself, and it must have no "run"
// entry, so that no two readers see two different runs in one statement.
func parsePredicate(predicate *structpb.Struct) (*testresult.TestResult, runFields, error) {
	predJSON, err := protojson.Marshal(predicate)
	if err != nil {
		return nil, runFields{}, fmt.Errorf("%w: predicate: %v", ErrNotAValidation, err)
	}
	var run runFields
	tr := &testresult.TestResult{}
	strictErr := protojson.Unmarshal(predJSON, tr)
	if strictErr != nil {
		tr = &testresult.TestResult{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(predJSON, tr); err != nil {
			return nil, runFields{}, fmt.Errorf("%w: predicate: %v", ErrNotAValidation, err)
		}
		if run, err = decodeRunFields(predJSON); err != nil {
			return nil, runFields{}, fmt.Errorf("%w: predicate: %v", ErrNotAValidation, err)
		}
		if run.JobID == "" {
			// Not the earlier form either: say why it is not the spec's test-result.
			return nil, runFields{}, fmt.Errorf("%w: predicate is not an in-toto test-result: %v", ErrNotAValidation, strictErr)
		}
	}
	var runs []*intoto.ResourceDescriptor
	for _, c := range tr.GetConfiguration() {
		if c.GetName() == configRun {
			runs = append(runs, c)
		}
	}
	switch {
	case strictErr != nil && len(runs) > 0:
		return nil, runFields{}, fmt.Errorf("%w: the predicate has run fields both in itself and in a %q configuration entry", ErrNotAValidation, configRun)
	case strictErr != nil:
		return tr, run, nil
	case len(runs) != 1:
		return nil, runFields{}, fmt.Errorf("%w: %d %q configuration entries, want one", ErrNotAValidation, len(runs), configRun)
	}
	annotations, err := protojson.Marshal(runs[0].GetAnnotations())
	if err != nil {
		return nil, runFields{}, fmt.Errorf("%w: run annotations: %v", ErrNotAValidation, err)
	}
	if run, err = decodeRunFields(annotations); err != nil {
		return nil, runFields{}, fmt.Errorf("%w: run annotations: %v", ErrNotAValidation, err)
	}
	return tr, run, nil
}

// runFieldNames are the JSON names of runFields' fields.
var runFieldNames = []string{"jobId", "claimNumber", "worker", "startedOn", "finishedOn", "exitCode", "logDigest", "reason", "isolation", "network"}

// decodeRunFields reads the run fields of a JSON object. encoding/json matches names whatever
// their case, and a reader of the exact names would not: an object with "jobid" beside
// "jobId" would be one job to ag and another to an auditor's tool. A name that is a run field's
// but for its case is refused.
func decodeRunFields(data []byte) (runFields, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return runFields{}, err
	}
	for name := range members {
		for _, field := range runFieldNames {
			if name != field && strings.EqualFold(name, field) {
				return runFields{}, fmt.Errorf("member %q is %q but for its case", name, field)
			}
		}
	}
	var run runFields
	err := json.Unmarshal(data, &run)
	return run, err
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// SignValidation signs v's statement into a DSSE envelope of the in-toto payload type.
func (s *Signer) SignValidation(ctx context.Context, v Validation) (*dsse.Envelope, error) {
	payload, err := StatementJSON(v)
	if err != nil {
		return nil, err
	}
	return s.SignEnvelope(ctx, PayloadTypeInToto, payload)
}

// VerifyValidation checks env's signature against keys (raw Ed25519 public keys), its payload
// type, and decodes its statement. It answers the validation and the id of the key that
// verified.
func VerifyValidation(ctx context.Context, env *dsse.Envelope, keys [][]byte) (Validation, string, error) {
	keyID, err := Verify(ctx, env, keys)
	if err != nil {
		return Validation{}, "", err
	}
	if env.PayloadType != PayloadTypeInToto {
		return Validation{}, "", fmt.Errorf("%w: payload type %q, want %q", ErrNotAValidation, env.PayloadType, PayloadTypeInToto)
	}
	payload, err := env.DecodeB64Payload()
	if err != nil {
		return Validation{}, "", fmt.Errorf("%w: payload: %v", ErrNotAValidation, err)
	}
	v, err := ParseStatement(payload)
	if err != nil {
		return Validation{}, "", err
	}
	return v, keyID, nil
}

// Decode parses a stored envelope (its DSSE JSON).
func Decode(data []byte) (*dsse.Envelope, error) {
	env := &dsse.Envelope{}
	if err := json.Unmarshal(data, env); err != nil {
		return nil, fmt.Errorf("decode envelope: %w", err)
	}
	if env.PayloadType == "" || env.Payload == "" || len(env.Signatures) == 0 {
		return nil, errors.New("decode envelope: needs payloadType, payload and at least one signature")
	}
	return env, nil
}
