package server

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/agwp"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/structjson"
)

// Limits on request fields. A request that breaks one is invalid_argument naming the field and
// the rule, before anything changes.
const (
	maxLabelLen       = 128
	maxIDLen          = 128
	maxUniqueKeyLen   = 256
	maxProgressBytes  = 1 << 10
	maxOutputBytes    = 64 << 10
	maxErrorBytes     = 4 << 10
	maxPayloadBytes   = 1 << 20
	maxPayloadDepth   = 64 // nested objects and lists in a payload or result
	maxMaxAttempts    = 100
	defaultMaxAttempt = 5
	defaultPageSize   = 100
	maxPageSize       = 1000
	defaultLease      = 30 * time.Second
	minLease          = time.Second
	maxLease          = time.Hour
	maxClaimWait      = 60 * time.Second
	maxBatch          = 256 // jobs of one ClaimJobs, completions of one CompleteJobs
	maxEnqueueDelay   = 30 * 24 * time.Hour
	maxRetryDelay     = 30 * 24 * time.Hour
)

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// Labels, kinds and job ids are checked on every job a worker claims or reports: as character
// classes, not regular expressions, which took 1.1 µs for a label of 31 characters against 40 ns.
var (
	labelChars = newCharset("A-Za-z0-9._:@/-") // 1-128
	kindChars  = newCharset("a-z0-9_.-")       // 1-64
	idChars    = newCharset("A-Za-z0-9_.:-")   // 1-128
)

func isLabel(s string) bool { return labelChars.matches(s, 1, 128) }
func isKind(s string) bool  { return kindChars.matches(s, 1, 64) }
func isID(s string) bool    { return idChars.matches(s, 1, 128) }

// charset is a set of ASCII characters.
type charset [256]bool

// newCharset answers the set a regular expression's class (without its brackets) names: single
// characters and ranges such as a-z; a - at the end is itself.
func newCharset(class string) *charset {
	var c charset
	for i := 0; i < len(class); i++ {
		if i+2 < len(class) && class[i+1] == '-' {
			for b := int(class[i]); b <= int(class[i+2]); b++ {
				c[b] = true
			}
			i += 2
			continue
		}
		c[class[i]] = true
	}
	return &c
}

// matches reports whether s is least to most characters, all of c.
func (c *charset) matches(s string, least, most int) bool {
	if len(s) < least || len(s) > most {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !c[s[i]] {
			return false
		}
	}
	return true
}

// invalid answers the invalid_argument error for a field.
func invalid(field, format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func validateLabel(field, label string) error {
	if label == "" {
		return invalid(field, "is required: a worker or holder label of 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	if !isLabel(label) {
		return invalid(field, "%q is not a label: use 1-128 characters of [A-Za-z0-9._:@/-]", truncate(label, 140))
	}
	return nil
}

func validateKind(field, kind string) error {
	if !isKind(kind) {
		return invalid(field, "%q is not a job kind: use 1-64 characters of [a-z0-9_.-]", truncate(kind, 80))
	}
	return nil
}

// reservedKindPrefixes are the kinds, besides agwp.KindValidate itself, that the server keeps
// for the jobs it starts. A worker runs a validate job's command on trust that the gate wrote
// it: from anyone else, that job is a way to run code on a validation worker, beside its key.
var reservedKindPrefixes = []string{agwp.KindValidate + ".", "ag.gate."}

// refuseReservedKind answers permission_denied, whoever calls, for a kind only the server may
// enqueue.
func refuseReservedKind(field, kind string) error {
	reserved := kind == agwp.KindValidate
	for _, prefix := range reservedKindPrefixes {
		reserved = reserved || strings.HasPrefix(kind, prefix)
	}
	if !reserved {
		return nil
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"%s: %q is reserved for the jobs the server starts (%s, %s*, %s*): validations are enqueued by the integration queue, never through EnqueueJob",
		field, kind, agwp.KindValidate, reservedKindPrefixes[0], reservedKindPrefixes[1]))
}

func validateName(field, name string) error {
	if !namePattern.MatchString(name) {
		return invalid(field, "%q is not a name: start with [a-z0-9], then up to 63 of [a-z0-9._-]", truncate(name, 80))
	}
	return nil
}

func validateID(field, id string) error {
	if id == "" {
		return invalid(field, "is required")
	}
	if !isID(id) {
		return invalid(field, "%q is not an id", truncate(id, 140))
	}
	return nil
}

// fencingToken reads a claim number: 0 means not given; above the uint32 range it cannot be a
// claim number and is refused rather than read as "none" (ADR-0012).
func fencingToken(field string, v uint64) (uint32, error) {
	if v > math.MaxUint32 {
		return 0, invalid(field, "%d cannot be a claim number (at most %d): send the attempts of the claimed job", v, uint64(math.MaxUint32))
	}
	return uint32(v), nil
}

// duration reads an optional Duration within [lo, hi]; absent answers def.
func duration(field string, d *durationpb.Duration, def, lo, hi time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid(field, "is not a valid duration: %v", err)
	}
	v := d.AsDuration()
	if v < lo || v > hi {
		return 0, invalid(field, "%s is out of range: use %s to %s", v, lo, hi)
	}
	return v, nil
}

func maxBytes(field, s string, limit int) error {
	if len(s) > limit {
		return invalid(field, "is %d bytes, more than the limit of %d", len(s), limit)
	}
	return nil
}

func validateDigest(field, d string) error {
	if d != "" && !digestPattern.MatchString(d) {
		return invalid(field, "%q is not a digest: use sha256:<64 lowercase hex>", truncate(d, 80))
	}
	return nil
}

// structJSON encodes a Struct as the JSON the store keeps; nil stays nil. The depth is bounded
// before anything else: a value nested thousands deep decodes at the edge but not everywhere
// after it, so stored once it would fail every later list that holds it, and every worker.
func structJSON(field string, s *structpb.Struct) ([]byte, error) {
	if s == nil {
		return nil, nil
	}
	if depth := structDepth(s, 1, maxPayloadDepth+1); depth > maxPayloadDepth {
		return nil, invalid(field, "nests objects and lists more than %d deep", maxPayloadDepth)
	}
	b, err := structjson.Marshal(s)
	if err != nil {
		return nil, invalid(field, "cannot be encoded as JSON: %v", err)
	}
	if len(b) > maxPayloadBytes {
		return nil, invalid(field, "is %d bytes of JSON, more than the limit of %d", len(b), maxPayloadBytes)
	}
	return b, nil
}

// structDepth answers the nesting depth of s, which is at depth, counting no further than stop.
func structDepth(s *structpb.Struct, depth, stop int) int {
	if depth >= stop {
		return depth // as a list does: the bound is met before a field is read
	}
	deepest := depth
	for _, v := range s.GetFields() {
		if deepest = max(deepest, valueDepth(v, depth, stop)); deepest >= stop {
			return deepest
		}
	}
	return deepest
}

func valueDepth(v *structpb.Value, depth, stop int) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return structDepth(k.StructValue, depth+1, stop)
	case *structpb.Value_ListValue:
		deepest := depth + 1
		if deepest >= stop {
			return deepest
		}
		for _, item := range k.ListValue.GetValues() {
			if deepest = max(deepest, valueDepth(item, depth+1, stop)); deepest >= stop {
				return deepest
			}
		}
		return deepest
	}
	return depth
}

func pageSize(field string, n int32) (int, error) {
	switch {
	case n < 0:
		return 0, invalid(field, "must not be negative")
	case n == 0:
		return defaultPageSize, nil
	case n > maxPageSize:
		return maxPageSize, nil
	}
	return int(n), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// validateEnqueue answers the store's parameters of a valid enqueue (without the enqueuer).
func validateEnqueue(req *agwpv1.EnqueueJobRequest) (store.EnqueueJobParams, error) {
	if err := validateKind("kind", req.GetKind()); err != nil {
		return store.EnqueueJobParams{}, err
	}
	if err := refuseReservedKind("kind", req.GetKind()); err != nil {
		return store.EnqueueJobParams{}, err
	}
	if req.GetMaxAttempts() > maxMaxAttempts {
		return store.EnqueueJobParams{}, invalid("max_attempts", "%d is more than %d", req.GetMaxAttempts(), maxMaxAttempts)
	}
	delay, err := duration("delay", req.GetDelay(), 0, 0, maxEnqueueDelay)
	if err != nil {
		return store.EnqueueJobParams{}, err
	}
	if len(req.GetUniqueKey()) > maxUniqueKeyLen {
		return store.EnqueueJobParams{}, invalid("unique_key", "is %d bytes, more than %d", len(req.GetUniqueKey()), maxUniqueKeyLen)
	}
	payload, err := structJSON("payload", req.GetPayload())
	if err != nil {
		return store.EnqueueJobParams{}, err
	}
	maxAttempts := req.GetMaxAttempts()
	if maxAttempts == 0 {
		maxAttempts = defaultMaxAttempt
	}
	return store.EnqueueJobParams{
		Kind:        req.GetKind(),
		Payload:     payload,
		Priority:    req.GetPriority(),
		MaxAttempts: maxAttempts,
		Delay:       delay,
		UniqueKey:   req.GetUniqueKey(),
	}, nil
}

func validateKinds(field string, kinds []string) error {
	if len(kinds) > 100 {
		return invalid(field, "has %d kinds, more than 100", len(kinds))
	}
	for i, k := range kinds {
		if err := validateKind(fmt.Sprintf("%s[%d]", field, i), k); err != nil {
			return err
		}
	}
	return nil
}

// validateClaim answers the lease and the long-poll wait of a valid claim.
func validateClaim(req *agwpv1.ClaimJobRequest) (lease, wait time.Duration, err error) {
	if err := validateLabel("worker", req.GetWorker()); err != nil {
		return 0, 0, err
	}
	if err := validateKinds("kinds", req.GetKinds()); err != nil {
		return 0, 0, err
	}
	if lease, err = duration("lease", req.GetLease(), defaultLease, minLease, maxLease); err != nil {
		return 0, 0, err
	}
	wait, err = duration("wait", req.GetWait(), 0, 0, maxClaimWait)
	return lease, wait, err
}

// validateClaimJobs answers the lease, the wait and the most jobs of a valid ClaimJobs.
func validateClaimJobs(req *agwpv1.ClaimJobsRequest) (lease, wait time.Duration, most int, err error) {
	lease, wait, err = validateClaim(&agwpv1.ClaimJobRequest{
		Worker: req.GetWorker(), Kinds: req.GetKinds(), Lease: req.GetLease(), Wait: req.GetWait(),
	})
	if err != nil {
		return 0, 0, 0, err
	}
	most = int(max(req.GetMaxJobs(), 1))
	if req.GetMaxJobs() > maxBatch {
		return 0, 0, 0, invalid("max_jobs", "at most %d, got %d", maxBatch, req.GetMaxJobs())
	}
	return lease, wait, most, nil
}

// validateCompleteJobs checks a CompleteJobs request as a whole: the number of completions,
// each one as CompleteJob checks it (the error names its index), and that no job comes twice.
// It answers each completion's claim number and result.
func validateCompleteJobs(req *agwpv1.CompleteJobsRequest) (tokens []uint32, results [][]byte, err error) {
	cs := req.GetCompletions()
	if len(cs) == 0 || len(cs) > maxBatch {
		return nil, nil, invalid("completions", "1 to %d completions, got %d", maxBatch, len(cs))
	}
	tokens, results = make([]uint32, len(cs)), make([][]byte, len(cs))
	seen := make(map[string]int, len(cs))
	for i, c := range cs {
		if tokens[i], results[i], err = validateComplete(c); err != nil {
			var ce *connect.Error
			if errors.As(err, &ce) {
				return nil, nil, connect.NewError(ce.Code(), fmt.Errorf("completions[%d].%s", i, ce.Message()))
			}
			return nil, nil, err
		}
		if j, dup := seen[c.GetJobId()]; dup {
			return nil, nil, invalid(fmt.Sprintf("completions[%d].job_id", i), "job %s is completed by completions[%d] already", c.GetJobId(), j)
		}
		seen[c.GetJobId()] = i
	}
	return tokens, results, nil
}

// validateHeartbeat answers the claim number and the new lease (0: the claim's own) of a valid
// heartbeat.
func validateHeartbeat(req *agwpv1.HeartbeatJobRequest) (token uint32, lease time.Duration, err error) {
	if err := validateID("job_id", req.GetJobId()); err != nil {
		return 0, 0, err
	}
	if err := validateLabel("worker", req.GetWorker()); err != nil {
		return 0, 0, err
	}
	if lease, err = duration("lease", req.GetLease(), 0, minLease, maxLease); err != nil {
		return 0, 0, err
	}
	if err := maxBytes("progress", req.GetProgress(), maxProgressBytes); err != nil {
		return 0, 0, err
	}
	if err := maxBytes("output", req.GetOutput(), maxOutputBytes); err != nil {
		return 0, 0, err
	}
	token, err = fencingToken("fencing_token", req.GetFencingToken())
	return token, lease, err
}

// validateComplete answers the claim number and the result (JSON) of a valid completion.
func validateComplete(req *agwpv1.CompleteJobRequest) (token uint32, result []byte, err error) {
	if err := validateID("job_id", req.GetJobId()); err != nil {
		return 0, nil, err
	}
	if err := validateLabel("worker", req.GetWorker()); err != nil {
		return 0, nil, err
	}
	if err := maxBytes("output", req.GetOutput(), maxOutputBytes); err != nil {
		return 0, nil, err
	}
	if err := validateDigest("output_digest", req.GetOutputDigest()); err != nil {
		return 0, nil, err
	}
	if result, err = structJSON("result", req.GetResult()); err != nil {
		return 0, nil, err
	}
	token, err = fencingToken("fencing_token", req.GetFencingToken())
	return token, result, err
}

// validateFail answers the claim number and the retry delay (nil: the server's backoff) of a
// valid failure.
func validateFail(req *agwpv1.FailJobRequest) (token uint32, retryDelay *time.Duration, err error) {
	if err := validateID("job_id", req.GetJobId()); err != nil {
		return 0, nil, err
	}
	if err := validateLabel("worker", req.GetWorker()); err != nil {
		return 0, nil, err
	}
	if err := maxBytes("error", req.GetError(), maxErrorBytes); err != nil {
		return 0, nil, err
	}
	if err := maxBytes("output", req.GetOutput(), maxOutputBytes); err != nil {
		return 0, nil, err
	}
	if req.GetRetryDelay() != nil {
		d, err := duration("retry_delay", req.GetRetryDelay(), 0, 0, maxRetryDelay)
		if err != nil {
			return 0, nil, err
		}
		retryDelay = &d
	}
	token, err = fencingToken("fencing_token", req.GetFencingToken())
	return token, retryDelay, err
}
