package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
)

// Outcome classes of a recorded request.
const (
	outcomeOK      = "ok"      // the server accepted it
	outcomeRefused = "refused" // the server answered a definite refusal: nothing changed
	outcomeUnknown = "unknown" // no answer, or one that does not say whether it was applied
)

// Expect is what a recorded request must get, when the harness knows it in advance.
type Expect int

const (
	// ExpectAny: either outcome is right.
	ExpectAny Expect = iota
	// ExpectRefused: the request carries a claim number or lease token that the harness saw
	// superseded before sending it; accepting it violates the fencing.
	ExpectRefused
	// ExpectAccepted: the request carries the current claim number or lease token and nothing
	// can have taken it away; refusing it is wrong too.
	ExpectAccepted
)

func (e Expect) String() string {
	switch e {
	case ExpectRefused:
		return "refused"
	case ExpectAccepted:
		return "accepted"
	}
	return ""
}

// Op is one recorded request and its answer.
type Op struct {
	Seq     int64     `json:"seq"`
	Call    int64     `json:"call"` // the logical call; a call retried on another replica has one Call and several Ops
	Actor   string    `json:"actor"`
	Replica int       `json:"replica"`
	Method  string    `json:"method"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`

	// Key fields of the request.
	Job     string   `json:"job,omitempty"`
	Kind    string   `json:"kind,omitempty"`
	Worker  string   `json:"worker,omitempty"` // label
	Claim   uint64   `json:"claim,omitempty"`  // fencing token sent, or the claim number received
	Final   bool     `json:"final,omitempty"`
	Repo    string   `json:"repo,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	Holder  string   `json:"holder,omitempty"` // label
	Lease   string   `json:"lease,omitempty"`
	Token   uint64   `json:"token,omitempty"` // lease token sent or granted
	Tokens  []uint64 `json:"tokens,omitempty"`
	Change  string   `json:"change,omitempty"`
	LeaseNS int64    `json:"lease_ns,omitempty"` // the claim's lease asked for

	// A call of a batch method (ClaimJobs, CompleteJobs) is recorded as one Op per item, each
	// shaped as the single call's would be (Method "ClaimJob" or "CompleteJob", its own job,
	// claim number and outcome, the call's Start and End), so that every check applies to the
	// items unchanged. These fields say which call carried the item.
	Batch     string `json:"batch,omitempty"`      // the batch method
	BatchReq  int64  `json:"batch_req,omitempty"`  // the request, shared by the Ops of its items
	BatchItem int    `json:"batch_item,omitempty"` // 1-based: the completion's place in the request, the job's in the answer

	// The answer.
	Outcome   string    `json:"outcome"`
	Code      string    `json:"code"` // "ok" or the Connect code
	Message   string    `json:"message,omitempty"`
	State     string    `json:"state,omitempty"` // of the job or change answered
	Attempts  uint32    `json:"attempts,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // lease expiry answered (claim, heartbeat, lease)

	Expect   Expect `json:"-"`
	ExpectS  string `json:"expect,omitempty"`
	WantCode string `json:"want_code,omitempty"` // with ExpectRefused: the code the contract names
	Why      string `json:"why,omitempty"`       // why the expectation holds
}

// History is the log of every request and answer of the recorded clients.
type History struct {
	mu      sync.Mutex
	ops     []Op
	seq     atomic.Int64
	calls   atomic.Int64
	batches atomic.Int64 // requests of batch methods, for Op.BatchReq
}

func (h *History) add(op Op) {
	op.Seq = h.seq.Add(1)
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops answers a copy of the history so far, in the order the answers came.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// WriteJSONL writes the history as one JSON object a line.
func (h *History) WriteJSONL(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, op := range h.Ops() {
		if err := enc.Encode(op); err != nil {
			return err
		}
	}
	return nil
}

// expectation travels in a request's context to the recorder.
type expectation struct {
	call     int64
	method   string // the method the expectation is about
	expect   Expect
	wantCode connect.Code
	why      string
	// items narrows an expectation about a batch call to the items of these jobs, each with
	// its own reason (in place of why): a batch may mix stale claims with current ones. nil:
	// the expectation is about every item (and about a single call).
	items map[string]string
}

// apply sets the expectation on a recorded op it is about.
func (e expectation) apply(op *Op) {
	if e.method != op.Method || e.expect == ExpectAny {
		return
	}
	why := e.why
	if e.items != nil {
		w, ok := e.items[op.Job]
		if !ok {
			return
		}
		why = w
	}
	op.Expect, op.ExpectS, op.Why = e.expect, e.expect.String(), why
	if e.expect == ExpectRefused {
		op.WantCode = e.wantCode.String()
	}
}

type expectKey struct{}

func withExpectation(ctx context.Context, e expectation) context.Context {
	return context.WithValue(ctx, expectKey{}, e)
}

// recorder is a Connect interceptor that records every unary call of one actor on one replica.
type recorder struct {
	h       *History
	actor   string
	replica int
	token   string
	timeout time.Duration
}

func (r recorder) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+r.token)
		req.Header().Set("User-Agent", "ag-chaos")
		// A paused replica answers nothing: every call has a deadline.
		ctx, cancel := context.WithTimeout(ctx, r.timeout+longPollWait(req.Any()))
		defer cancel()
		op := Op{Actor: r.actor, Replica: r.replica, Method: methodName(req.Spec().Procedure), Start: time.Now()}
		e, _ := ctx.Value(expectKey{}).(expectation)
		op.Call = e.call
		requestFields(&op, req.Any())
		res, err := next(ctx, req)
		op.End = time.Now()
		var answer any
		if err == nil {
			answer = res.Any()
		}
		for _, o := range recordOps(op, req.Any(), answer, err, r.h.batches.Add) {
			e.apply(&o)
			r.h.add(o)
		}
		return res, err
	}
}

// recordOps answers the ops that record one request (op: its common fields and the request's
// key fields) and its answer (nil when the call failed with err): one, or one per item of a
// batch call, whose request nextReq numbers.
func recordOps(op Op, req, answer any, err error, nextReq func(int64) int64) []Op {
	op.Outcome, op.Code = classify(err)
	if err != nil {
		op.Message = err.Error()
		if len(op.Message) > 300 {
			op.Message = op.Message[:300] + "..."
		}
	}
	switch m := req.(type) {
	case *agwpv1.ClaimJobsRequest:
		// As ClaimJob: a failed call, or an empty answer, is one op without a job; a call that
		// got no answer may have claimed jobs, which the audit log shows, as for ClaimJob.
		op.Method, op.Batch, op.BatchReq = "ClaimJob", "ClaimJobs", nextReq(1)
		res, _ := answer.(*agwpv1.ClaimJobsResponse) // nil when the call failed
		jobs := res.GetJobs()
		if len(jobs) == 0 {
			return []Op{op}
		}
		ops := make([]Op, len(jobs))
		for i, j := range jobs {
			ops[i] = op
			ops[i].BatchItem = i + 1
			responseFields(&ops[i], &agwpv1.ClaimJobResponse{Job: j})
		}
		return ops
	case *agwpv1.CompleteJobsRequest:
		op.Method, op.Batch, op.BatchReq = "CompleteJob", "CompleteJobs", nextReq(1)
		cs := m.GetCompletions()
		res, _ := answer.(*agwpv1.CompleteJobsResponse)
		results := res.GetResults()
		if err == nil && len(results) != len(cs) {
			// An answer that cannot be matched to its completions says of none of them
			// whether it was applied.
			op.Outcome, op.Code = outcomeUnknown, "unmatched"
			op.Message = fmt.Sprintf("%d results for %d completions", len(results), len(cs))
		}
		ops := make([]Op, len(cs))
		for i, c := range cs {
			o := op
			o.BatchItem = i + 1
			requestFields(&o, c)
			if o.Outcome == outcomeOK {
				// The call went through; each item has its own outcome, classified as
				// CompleteJob's error would be.
				r := results[i]
				if rerr := client.ResultError(r); rerr == nil {
					responseFields(&o, &agwpv1.CompleteJobResponse{Job: r.GetJob()})
				} else {
					o.Outcome, o.Code = classify(rerr)
					o.Message = r.GetErrorMessage()
				}
			}
			// Otherwise the call failed as a whole: refused (nothing applied) or with no
			// answer (each item's outcome unknown), as a CompleteJob that failed so.
			ops[i] = o
		}
		return ops
	}
	if err == nil {
		responseFields(&op, answer)
	}
	return []Op{op}
}

func (r recorder) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+r.token)
		return conn
	}
}

func (r recorder) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func longPollWait(msg any) time.Duration {
	switch m := msg.(type) {
	case *agwpv1.ClaimJobRequest:
		return m.GetWait().AsDuration()
	case *agwpv1.ClaimJobsRequest:
		return m.GetWait().AsDuration()
	case *agwpv1.AcquireLeaseRequest:
		return m.GetWait().AsDuration()
	case *agwpv1.GetChangeRequest:
		return m.GetWait().AsDuration()
	case *agwpv1.ListAuditEventsRequest:
		return m.GetWait().AsDuration()
	}
	return 0
}

func methodName(procedure string) string {
	return procedure[strings.LastIndexByte(procedure, '/')+1:]
}

// classify answers the outcome class and code of a call's error.
func classify(err error) (outcome, code string) {
	if err == nil {
		return outcomeOK, "ok"
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return outcomeUnknown, "transport"
	}
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled,
		connect.CodeUnknown, connect.CodeInternal, connect.CodeDataLoss:
		return outcomeUnknown, ce.Code().String()
	}
	return outcomeRefused, ce.Code().String()
}

// isUnknown reports whether err leaves it open whether the request was applied.
func isUnknown(err error) bool {
	o, _ := classify(err)
	return o == outcomeUnknown
}

func requestFields(op *Op, msg any) {
	switch m := msg.(type) {
	case *agwpv1.EnqueueJobRequest:
		op.Kind = m.GetKind()
	case *agwpv1.ClaimJobRequest:
		op.Worker, op.LeaseNS = m.GetWorker(), int64(m.GetLease().AsDuration())
		op.Kind = strings.Join(m.GetKinds(), ",")
	case *agwpv1.ClaimJobsRequest:
		op.Worker, op.LeaseNS = m.GetWorker(), int64(m.GetLease().AsDuration())
		op.Kind = strings.Join(m.GetKinds(), ",")
	case *agwpv1.HeartbeatJobRequest:
		op.Job, op.Worker, op.Claim = m.GetJobId(), m.GetWorker(), m.GetFencingToken()
	case *agwpv1.CompleteJobRequest:
		op.Job, op.Worker, op.Claim = m.GetJobId(), m.GetWorker(), m.GetFencingToken()
	case *agwpv1.FailJobRequest:
		op.Job, op.Worker, op.Claim, op.Final = m.GetJobId(), m.GetWorker(), m.GetFencingToken(), m.GetFinal()
	case *agwpv1.CancelJobRequest:
		op.Job = m.GetJobId()
	case *agwpv1.GetJobRequest:
		op.Job = m.GetJobId()
	case *agwpv1.AcquireLeaseRequest:
		op.Repo, op.Paths, op.Holder = m.GetRepository(), m.GetPaths(), m.GetHolder()
	case *agwpv1.RenewLeaseRequest:
		op.Lease, op.Token = m.GetLeaseId(), m.GetFencingToken()
	case *agwpv1.ReleaseLeaseRequest:
		op.Lease, op.Token = m.GetLeaseId(), m.GetFencingToken()
	case *agwpv1.IntegrateRequest:
		op.Repo, op.Holder, op.Tokens = m.GetRepository(), m.GetHolder(), m.GetFencingTokens()
		for _, e := range m.GetEdits() {
			op.Paths = append(op.Paths, e.GetPath())
		}
	case *agwpv1.GetTreeRequest:
		op.Repo = m.GetRepository()
	case *agwpv1.GetChangeRequest:
		op.Change = m.GetChangeId()
	}
}

func responseFields(op *Op, msg any) {
	job := func(j *agwpv1.Job) {
		if j == nil {
			return
		}
		op.Job, op.State, op.Attempts = j.GetId(), j.GetState().String(), j.GetAttempts()
	}
	switch m := msg.(type) {
	case *agwpv1.EnqueueJobResponse:
		job(m.GetJob())
	case *agwpv1.ClaimJobResponse:
		if j := m.GetJob(); j != nil {
			job(j)
			op.Claim = uint64(j.GetAttempts())
			op.ExpiresAt = j.GetLeaseExpiresAt().AsTime()
		}
	case *agwpv1.HeartbeatJobResponse:
		op.ExpiresAt = m.GetLeaseExpiresAt().AsTime()
	case *agwpv1.CompleteJobResponse:
		job(m.GetJob())
	case *agwpv1.FailJobResponse:
		job(m.GetJob())
	case *agwpv1.CancelJobResponse:
		job(m.GetJob())
	case *agwpv1.GetJobResponse:
		job(m.GetJob())
	case *agwpv1.AcquireLeaseResponse:
		l := m.GetLease()
		op.Lease, op.Token, op.ExpiresAt = l.GetId(), l.GetFencingToken(), l.GetExpiresAt().AsTime()
	case *agwpv1.RenewLeaseResponse:
		op.ExpiresAt = m.GetLease().GetExpiresAt().AsTime()
	case *agwpv1.IntegrateResponse:
		op.Change, op.State = m.GetChange().GetId(), m.GetChange().GetState().String()
	case *agwpv1.GetChangeResponse:
		op.State = m.GetChange().GetState().String()
	}
}

// newRecordedClient answers an SDK client of one replica whose every call is recorded in h,
// never retried by the SDK (the harness retries on another replica itself, and records each
// try), and bounded by timeout (plus the wait of a long poll).
func newRecordedClient(h *History, hc *http.Client, url, token, actor string, replica int, timeout time.Duration) *client.Client {
	opts := []connect.ClientOption{connect.WithInterceptors(recorder{h: h, actor: actor, replica: replica, token: token, timeout: timeout})}
	return &client.Client{
		Jobs:   agwpv1connect.NewJobServiceClient(hc, url, opts...),
		Admin:  agwpv1connect.NewAdminServiceClient(hc, url, opts...),
		Leases: agwpv1connect.NewLeaseServiceClient(hc, url, opts...),
		Repos:  agwpv1connect.NewRepositoryServiceClient(hc, url, opts...),
		Audit:  agwpv1connect.NewAuditServiceClient(hc, url, opts...),
	}
}
