package server

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

// The contract's forms of labels, kinds and ids, which validation checks as character classes.
var (
	labelPattern = regexp.MustCompile(`^[A-Za-z0-9._:@/-]{1,128}$`)
	kindPattern  = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)
	idPattern    = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
)

// FuzzRequestValidation ensures validation never panics, refuses only with invalid_argument
// naming a field, and accepts exactly the labels, kinds and claim numbers the contract allows.
func FuzzRequestValidation(f *testing.F) {
	f.Add("w1", "ag.noop", "job_1", uint64(1), int64(30), int64(0), "progress")
	f.Add("", "", "", uint64(math.MaxUint32+1), int64(-1), int64(61), strings.Repeat("p", 2000))
	f.Add("host:1/pid@x", "a-b_c.d", "job_9x2k", uint64(0), int64(3600), int64(60), "")
	f.Add("bad label", "UPPER", "job id", uint64(math.MaxUint64), int64(3601), int64(1), "\x00")
	f.Fuzz(func(t *testing.T, label, kind, jobID string, token uint64, leaseSec, waitSec int64, progress string) {
		_, _, claimErr := validateClaim(&agwpv1.ClaimJobRequest{
			Worker: label, Kinds: []string{kind},
			Lease: durationpb.New(time.Duration(leaseSec) * time.Second),
			Wait:  durationpb.New(time.Duration(waitSec) * time.Second),
		})
		labelOK := labelPattern.MatchString(label)
		kindOK := kindPattern.MatchString(kind)
		if isLabel(label) != labelOK || isKind(label) != kindPattern.MatchString(label) || isID(label) != idPattern.MatchString(label) {
			t.Fatalf("%q: label %v, kind %v, id %v; the contract's patterns say %v, %v, %v", label, isLabel(label), isKind(label), isID(label),
				labelOK, kindPattern.MatchString(label), idPattern.MatchString(label))
		}
		leaseOK := leaseSec >= 1 && leaseSec <= 3600
		waitOK := waitSec >= 0 && waitSec <= 60
		if (claimErr == nil) != (labelOK && kindOK && leaseOK && waitOK) {
			t.Fatalf("claim(label %q, kind %q, lease %ds, wait %ds) = %v", label, kind, leaseSec, waitSec, claimErr)
		}
		_, _, hbErr := validateHeartbeat(&agwpv1.HeartbeatJobRequest{JobId: jobID, Worker: label, FencingToken: token, Progress: progress})
		hbOK := labelOK && idPattern.MatchString(jobID) && token <= math.MaxUint32 && len(progress) <= maxProgressBytes
		if (hbErr == nil) != hbOK {
			t.Fatalf("heartbeat(job %q, label %q, token %d, %d bytes of progress) = %v", jobID, label, token, len(progress), hbErr)
		}
		_, _, completeErr := validateComplete(&agwpv1.CompleteJobRequest{JobId: jobID, Worker: label, FencingToken: token, Output: progress, OutputDigest: kind})
		_, _, failErr := validateFail(&agwpv1.FailJobRequest{JobId: jobID, Worker: label, FencingToken: token, Error: progress})
		_, enqueueErr := validateEnqueue(&agwpv1.EnqueueJobRequest{Kind: kind, UniqueKey: progress, Delay: durationpb.New(time.Duration(waitSec))})
		for _, err := range []error{claimErr, hbErr, completeErr, failErr, enqueueErr} {
			if err == nil {
				continue
			}
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("refusal %v is not invalid_argument", err)
			}
			if msg := err.(*connect.Error).Message(); !strings.Contains(msg, ": ") {
				t.Fatalf("refusal %q does not name a field", msg)
			}
		}
	})
}
