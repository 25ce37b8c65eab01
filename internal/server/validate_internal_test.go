package server

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// TestRequestFieldsAreValidatedAtEachEdge holds every rule of a request's fields at its edges:
// the last value taken and the first refused, each refusal invalid_argument naming the field
// (permission_denied for a kind only the server enqueues). The API tests check that a refusal
// reaches the caller; this one that each bound is where the contract puts it, as the mutation
// run of the package (scripts/mutation) asks.
func TestRequestFieldsAreValidatedAtEachEdge(t *testing.T) {
	t.Parallel()
	// check fails unless err refuses field with code (field "" : err is nil).
	check := func(t *testing.T, what string, err error, code connect.Code, field string) {
		t.Helper()
		switch {
		case field == "" && err != nil:
			t.Errorf("%s: %v; want it taken", what, err)
		case field == "":
		case err == nil:
			t.Errorf("%s taken; want %s refused", what, field)
		case connect.CodeOf(err) != code || !strings.HasPrefix(err.Error(), code.String()+": "+field+":"):
			t.Errorf("%s: %v; want %v naming %s", what, err, code, field)
		}
	}
	invalidArg := connect.CodeInvalidArgument
	id := "j_1"
	worker := "w1"
	long := func(n int) string { return strings.Repeat("a", n) }
	secs := func(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

	t.Run("character classes", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			is      func(string) bool
			allowed string
			most    int
		}{
			{"label", isLabel, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@/-", 128},
			{"kind", isKind, "abcdefghijklmnopqrstuvwxyz0123456789_.-", 64},
			{"id", isID, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-", 128},
		} {
			for b := 0; b < 256; b++ {
				want := strings.IndexByte(tc.allowed, byte(b)) >= 0
				if got := tc.is(string([]byte{byte(b)})); got != want {
					t.Errorf("is %s(%q) = %v, want %v", tc.name, []byte{byte(b)}, got, want)
				}
				if got := tc.is("a" + string([]byte{byte(b)}) + "a"); got != want {
					t.Errorf("is %s(%q) = %v, want %v", tc.name, "a"+string([]byte{byte(b)})+"a", got, want)
				}
			}
			if tc.is("") || !tc.is(long(tc.most)) || tc.is(long(tc.most+1)) {
				t.Errorf("%s: the lengths taken are not 1 to %d", tc.name, tc.most)
			}
		}
		check(t, "an empty label", validateLabel("worker", ""), invalidArg, "worker")
		check(t, "a label of a space", validateLabel("worker", " "), invalidArg, "worker")
		check(t, "an empty id", validateID("job_id", ""), invalidArg, "job_id")
		check(t, "an id of a slash", validateID("job_id", "a/b"), invalidArg, "job_id")
		check(t, "a name", validateName("repository", "app"), 0, "")
		check(t, "a name with a capital", validateName("repository", "App"), invalidArg, "repository")
	})

	t.Run("numbers and durations", func(t *testing.T) {
		for _, v := range []uint64{0, 1, math.MaxUint32} {
			got, err := fencingToken("fencing_token", v)
			check(t, "claim number", err, 0, "")
			if uint64(got) != v {
				t.Errorf("fencingToken(%d) = %d", v, got)
			}
		}
		for _, v := range []uint64{math.MaxUint32 + 1, 1<<32 + 2, math.MaxUint64} {
			_, err := fencingToken("fencing_token", v)
			check(t, "a claim number past u32", err, invalidArg, "fencing_token")
		}
		for _, tc := range []struct {
			d     *durationpb.Duration
			want  time.Duration
			field string
		}{
			{nil, 7 * time.Second, ""},
			{secs(time.Second), time.Second, ""},
			{secs(time.Hour), time.Hour, ""},
			{secs(time.Second - 1), 0, "lease"},
			{secs(time.Hour + 1), 0, "lease"},
			{&durationpb.Duration{Seconds: 1, Nanos: -1}, 0, "lease"},
		} {
			got, err := duration("lease", tc.d, 7*time.Second, time.Second, time.Hour)
			check(t, "lease "+tc.d.String(), err, invalidArg, tc.field)
			if got != tc.want {
				t.Errorf("duration(%v) = %v, want %v", tc.d, got, tc.want)
			}
		}
		check(t, "1 KiB of progress", maxBytes("progress", long(1024), 1024), 0, "")
		check(t, "1 KiB and a byte of progress", maxBytes("progress", long(1025), 1024), invalidArg, "progress")
		check(t, "no digest", validateDigest("output_digest", ""), 0, "")
		check(t, "a digest", validateDigest("output_digest", "sha256:"+strings.Repeat("0f", 32)), 0, "")
		check(t, "a digest in capitals", validateDigest("output_digest", "sha256:"+strings.Repeat("0F", 32)), invalidArg, "output_digest")
		for _, tc := range []struct {
			n     int32
			want  int
			field string
		}{{-1, 0, "page_size"}, {0, defaultPageSize, ""}, {1, 1, ""}, {maxPageSize, maxPageSize, ""}, {maxPageSize + 1, maxPageSize, ""}} {
			got, err := pageSize("page_size", tc.n)
			check(t, "page size", err, invalidArg, tc.field)
			if got != tc.want {
				t.Errorf("pageSize(%d) = %d, want %d", tc.n, got, tc.want)
			}
		}
		if got := truncate("abc", 3); got != "abc" {
			t.Errorf("truncate(abc, 3) = %q", got)
		}
		if got := truncate("abcd", 3); got != "abc..." {
			t.Errorf("truncate(abcd, 3) = %q", got)
		}
		if got := truncate("aé", 2); got != "a..." {
			t.Errorf("truncate(aé, 2) = %q, want a character cut whole", got)
		}
	})

	t.Run("payloads", func(t *testing.T) {
		nested := func(depth int, list bool) *structpb.Struct {
			v := structpb.NewStringValue("x")
			for i := 1; i < depth; i++ {
				if list {
					v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNullValue(), v}})
				} else {
					v = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewNullValue(), "b": v}})
				}
			}
			return &structpb.Struct{Fields: map[string]*structpb.Value{"b": v, "z": structpb.NewBoolValue(true)}}
		}
		if b, err := structJSON("payload", nil); b != nil || err != nil {
			t.Errorf("structJSON(nil) = %q, %v; want nothing", b, err)
		}
		for _, list := range []bool{false, true} {
			_, err := structJSON("payload", nested(maxPayloadDepth, list))
			check(t, "a payload 64 deep", err, invalidArg, "")
			_, err = structJSON("payload", nested(maxPayloadDepth+1, list))
			check(t, "a payload 65 deep", err, invalidArg, "payload")
			if d := structDepth(nested(maxPayloadDepth, list), 1, maxPayloadDepth+1); d != maxPayloadDepth {
				t.Errorf("depth of a payload %d deep (lists: %v) = %d", maxPayloadDepth, list, d)
			}
			// Counting stops at the bound (or one level past it), not at the bottom.
			if d := structDepth(nested(1000, list), 1, 10); d < 10 || d > 11 {
				t.Errorf("depth of a payload 1000 deep counted to 10 (lists: %v) = %d, want 10 or 11", list, d)
			}
		}
		// An empty list counts as a level of its own.
		emptyListAt := func(depth int) *structpb.Struct {
			v := structpb.NewListValue(&structpb.ListValue{})
			for i := 2; i < depth; i++ {
				v = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": v}})
			}
			return &structpb.Struct{Fields: map[string]*structpb.Value{"a": v}}
		}
		if d := structDepth(emptyListAt(5), 1, 100); d != 5 {
			t.Errorf("a payload whose empty list is 5 deep counts %d", d)
		}
		_, err := structJSON("payload", emptyListAt(maxPayloadDepth))
		check(t, "an empty list 64 deep", err, invalidArg, "")
		_, err = structJSON("payload", emptyListAt(maxPayloadDepth+1))
		check(t, "an empty list 65 deep", err, invalidArg, "payload")
		// {"a":"..."} is 8 bytes around its string.
		exact := &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue(long(maxPayloadBytes - 8))}}
		b, err := structJSON("payload", exact)
		check(t, "a payload of 1 MiB", err, invalidArg, "")
		if len(b) != maxPayloadBytes {
			t.Fatalf("the payload of 1 MiB is %d bytes", len(b))
		}
		exact.Fields["a"] = structpb.NewStringValue(long(maxPayloadBytes - 7))
		_, err = structJSON("payload", exact)
		check(t, "a payload of 1 MiB and a byte", err, invalidArg, "payload")
	})

	t.Run("enqueue", func(t *testing.T) {
		p, err := validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: "build"})
		check(t, "a kind alone", err, 0, "")
		if p.MaxAttempts != defaultMaxAttempt || p.Delay != 0 || p.Payload != nil {
			t.Errorf("an enqueue of a kind alone = %+v, want %d attempts, no delay, no payload", p, defaultMaxAttempt)
		}
		p, err = validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: "build", MaxAttempts: maxMaxAttempts, UniqueKey: long(maxUniqueKeyLen),
			Delay: secs(maxEnqueueDelay), Priority: 3})
		check(t, "every field at its most", err, 0, "")
		if p.MaxAttempts != maxMaxAttempts || p.Delay != maxEnqueueDelay || p.Priority != 3 || p.UniqueKey != long(maxUniqueKeyLen) {
			t.Errorf("an enqueue at its most = %+v", p)
		}
		_, err = validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: "build", MaxAttempts: maxMaxAttempts + 1})
		check(t, "101 attempts", err, invalidArg, "max_attempts")
		_, err = validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: "build", UniqueKey: long(maxUniqueKeyLen + 1)})
		check(t, "a unique key of 257 bytes", err, invalidArg, "unique_key")
		_, err = validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: "build", Delay: secs(maxEnqueueDelay + 1)})
		check(t, "a delay past 30 days", err, invalidArg, "delay")
		_, err = validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: "Build"})
		check(t, "a kind in capitals", err, invalidArg, "kind")
		_, err = validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: "build", Payload: nested65()})
		check(t, "a payload too deep", err, invalidArg, "payload")
		for _, kind := range []string{"validate", "validate.go", "ag.gate.advance"} {
			_, err = validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: kind})
			check(t, "the server's kind "+kind, err, connect.CodePermissionDenied, "kind")
		}
		for _, kind := range []string{"validatex", "ag.gatekeeper", "x.validate"} {
			_, err = validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: kind})
			check(t, "the kind "+kind, err, 0, "")
		}
	})

	t.Run("claims", func(t *testing.T) {
		kinds := make([]string, 100)
		for i := range kinds {
			kinds[i] = "build"
		}
		lease, wait, err := validateClaim(&agwpv1.ClaimJobRequest{Worker: worker, Kinds: kinds})
		check(t, "a claim of 100 kinds", err, 0, "")
		if lease != defaultLease || wait != 0 {
			t.Errorf("a claim without a lease or a wait: lease %v, wait %v; want %v and none", lease, wait, defaultLease)
		}
		_, wait, err = validateClaim(&agwpv1.ClaimJobRequest{Worker: worker, Wait: secs(maxClaimWait)})
		check(t, "a wait of a minute", err, 0, "")
		if wait != maxClaimWait {
			t.Errorf("wait %v, want %v", wait, maxClaimWait)
		}
		_, _, err = validateClaim(&agwpv1.ClaimJobRequest{Worker: worker, Wait: secs(maxClaimWait + 1)})
		check(t, "a wait past a minute", err, invalidArg, "wait")
		_, _, err = validateClaim(&agwpv1.ClaimJobRequest{Worker: worker, Kinds: append(kinds, "build")})
		check(t, "a claim of 101 kinds", err, invalidArg, "kinds")
		_, _, err = validateClaim(&agwpv1.ClaimJobRequest{Worker: worker, Kinds: []string{"build", "Build"}})
		check(t, "a bad second kind", err, invalidArg, "kinds[1]")
		_, _, err = validateClaim(&agwpv1.ClaimJobRequest{Worker: worker, Lease: secs(minLease - 1)})
		check(t, "a lease under a second", err, invalidArg, "lease")
		_, _, err = validateClaim(&agwpv1.ClaimJobRequest{})
		check(t, "no worker", err, invalidArg, "worker")
		for _, tc := range []struct {
			asked uint32
			most  int
			field string
		}{{0, 1, ""}, {1, 1, ""}, {maxBatch, maxBatch, ""}, {maxBatch + 1, 0, "max_jobs"}} {
			_, _, most, err := validateClaimJobs(&agwpv1.ClaimJobsRequest{Worker: worker, MaxJobs: tc.asked})
			check(t, "max_jobs", err, invalidArg, tc.field)
			if most != tc.most {
				t.Errorf("ClaimJobs of max_jobs %d claims at most %d, want %d", tc.asked, most, tc.most)
			}
		}
		_, _, _, err = validateClaimJobs(&agwpv1.ClaimJobsRequest{Worker: "a b"})
		check(t, "ClaimJobs of a bad worker", err, invalidArg, "worker")
	})

	t.Run("heartbeats, completions and failures", func(t *testing.T) {
		token, lease, err := validateHeartbeat(&agwpv1.HeartbeatJobRequest{JobId: id, Worker: worker, FencingToken: 3,
			Progress: long(maxProgressBytes), Output: long(maxOutputBytes)})
		check(t, "a heartbeat at its most", err, 0, "")
		if token != 3 || lease != 0 {
			t.Errorf("heartbeat: claim %d, lease %v; want 3 and the claim's own", token, lease)
		}
		for _, tc := range []struct {
			req   *agwpv1.HeartbeatJobRequest
			field string
		}{
			{&agwpv1.HeartbeatJobRequest{Worker: worker}, "job_id"},
			{&agwpv1.HeartbeatJobRequest{JobId: id}, "worker"},
			{&agwpv1.HeartbeatJobRequest{JobId: id, Worker: worker, Lease: secs(maxLease + 1)}, "lease"},
			{&agwpv1.HeartbeatJobRequest{JobId: id, Worker: worker, Progress: long(maxProgressBytes + 1)}, "progress"},
			{&agwpv1.HeartbeatJobRequest{JobId: id, Worker: worker, Output: long(maxOutputBytes + 1)}, "output"},
			{&agwpv1.HeartbeatJobRequest{JobId: id, Worker: worker, FencingToken: 1<<32 + 2}, "fencing_token"},
		} {
			_, _, err := validateHeartbeat(tc.req)
			check(t, "heartbeat", err, invalidArg, tc.field)
		}

		result := &structpb.Struct{Fields: map[string]*structpb.Value{"ok": structpb.NewBoolValue(true)}}
		token, res, err := validateComplete(&agwpv1.CompleteJobRequest{JobId: id, Worker: worker, FencingToken: 4, Result: result,
			Output: long(maxOutputBytes)})
		check(t, "a completion", err, 0, "")
		if token != 4 || string(res) != `{"ok":true}` {
			t.Errorf("completion: claim %d, result %s", token, res)
		}
		for _, tc := range []struct {
			req   *agwpv1.CompleteJobRequest
			field string
		}{
			{&agwpv1.CompleteJobRequest{Worker: worker}, "job_id"},
			{&agwpv1.CompleteJobRequest{JobId: id}, "worker"},
			{&agwpv1.CompleteJobRequest{JobId: id, Worker: worker, Output: long(maxOutputBytes + 1)}, "output"},
			{&agwpv1.CompleteJobRequest{JobId: id, Worker: worker, OutputDigest: "md5:0"}, "output_digest"},
			{&agwpv1.CompleteJobRequest{JobId: id, Worker: worker, Result: nested65()}, "result"},
			{&agwpv1.CompleteJobRequest{JobId: id, Worker: worker, FencingToken: 1<<32 + 2}, "fencing_token"},
		} {
			_, _, err := validateComplete(tc.req)
			check(t, "completion", err, invalidArg, tc.field)
		}

		token, delay, err := validateFail(&agwpv1.FailJobRequest{JobId: id, Worker: worker, FencingToken: 5,
			Error: long(maxErrorBytes), Output: long(maxOutputBytes)})
		check(t, "a failure", err, 0, "")
		if token != 5 || delay != nil {
			t.Errorf("failure: claim %d, retry delay %v; want 5 and the server's backoff", token, delay)
		}
		_, delay, err = validateFail(&agwpv1.FailJobRequest{JobId: id, Worker: worker, RetryDelay: secs(0)})
		check(t, "a failure retried at once", err, 0, "")
		if delay == nil || *delay != 0 {
			t.Errorf("failure with a retry delay of 0: %v, want 0", delay)
		}
		_, delay, err = validateFail(&agwpv1.FailJobRequest{JobId: id, Worker: worker, RetryDelay: secs(maxRetryDelay)})
		check(t, "a failure retried in 30 days", err, 0, "")
		if delay == nil || *delay != maxRetryDelay {
			t.Errorf("failure with a retry delay of 30 days: %v", delay)
		}
		for _, tc := range []struct {
			req   *agwpv1.FailJobRequest
			field string
		}{
			{&agwpv1.FailJobRequest{Worker: worker}, "job_id"},
			{&agwpv1.FailJobRequest{JobId: id}, "worker"},
			{&agwpv1.FailJobRequest{JobId: id, Worker: worker, Error: long(maxErrorBytes + 1)}, "error"},
			{&agwpv1.FailJobRequest{JobId: id, Worker: worker, Output: long(maxOutputBytes + 1)}, "output"},
			{&agwpv1.FailJobRequest{JobId: id, Worker: worker, RetryDelay: secs(maxRetryDelay + 1)}, "retry_delay"},
			{&agwpv1.FailJobRequest{JobId: id, Worker: worker, FencingToken: 1<<32 + 2}, "fencing_token"},
		} {
			_, _, err := validateFail(tc.req)
			check(t, "failure", err, invalidArg, tc.field)
		}

		completion := func(job string) *agwpv1.CompleteJobRequest {
			return &agwpv1.CompleteJobRequest{JobId: job, Worker: worker, FencingToken: 1}
		}
		many := make([]*agwpv1.CompleteJobRequest, maxBatch)
		for i := range many {
			many[i] = completion(fmt.Sprintf("j_%d", i))
		}
		tokens, results, err := validateCompleteJobs(&agwpv1.CompleteJobsRequest{Completions: many})
		check(t, "256 completions", err, 0, "")
		if len(tokens) != maxBatch || len(results) != maxBatch || tokens[maxBatch-1] != 1 {
			t.Errorf("256 completions answer %d claims and %d results", len(tokens), len(results))
		}
		_, _, err = validateCompleteJobs(&agwpv1.CompleteJobsRequest{Completions: append(many, completion("j_other"))})
		check(t, "257 completions", err, invalidArg, "completions")
		_, _, err = validateCompleteJobs(&agwpv1.CompleteJobsRequest{})
		check(t, "no completion", err, invalidArg, "completions")
		_, _, err = validateCompleteJobs(&agwpv1.CompleteJobsRequest{Completions: []*agwpv1.CompleteJobRequest{completion("j_1"), completion("j_2"), completion("j_1")}})
		check(t, "a job completed twice", err, invalidArg, "completions[2].job_id")
		_, _, err = validateCompleteJobs(&agwpv1.CompleteJobsRequest{Completions: []*agwpv1.CompleteJobRequest{completion("j_1"), {JobId: "j_2"}}})
		check(t, "a bad second completion", err, invalidArg, "completions[1].worker")
	})
}

// nested65 is a payload of objects nested 65 deep, one more than a payload may.
func nested65() *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := 1; i < maxPayloadDepth+1; i++ {
		s = &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStructValue(s)}}
	}
	return s
}
