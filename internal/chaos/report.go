package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Report is what a run found.
type Report struct {
	Seed     uint64
	Duration time.Duration // of the workload under faults
	Elapsed  time.Duration // of the whole run: setup, workload, drain, checks

	Schedule    []Fault
	Faults      map[FaultKind]int // injected, by kind
	FaultErrors []string          // faults that could not be injected or recovered from

	Ops    []OpCount // recorded requests by method; a batch method's by item
	Checks []Check   // every invariant, with what it checked

	Violations []Violation
	Notes      []string

	Jobs, AuditEvents                                  int
	StaleRefused                                       int // requests with a superseded claim number or token, refused
	WorkerRefusals                                     int // reports of ag-worker processes refused as lost claims (from their logs)
	GatedIntegrated, GatedRejected, ValidationFailures int
	FreeIntegrated                                     int

	Dir  string
	Kept bool
}

// OK reports whether no invariant was violated.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Check is one invariant as checked.
type Check struct {
	Name       string
	Checked    string // what was checked: counts
	Violations int
}

// OpCount counts a method's recorded requests by outcome. A batch method (ClaimJobs,
// CompleteJobs) is counted apart from its single counterpart, by item: its ops (one per job
// claimed or completion sent, or one for a call that claimed nothing), its calls and its jobs.
type OpCount struct {
	Method                  string
	OK, Refused, Unknown    int
	ExpectedRefusalsRefused int
	Calls, Jobs             int // of a batch method: requests, and the jobs they claimed or reported on
}

func countOps(ops []Op) []OpCount {
	by := map[string]*OpCount{}
	calls := map[int64]bool{}
	for _, op := range ops {
		method := op.Method
		if op.Batch != "" {
			// The items are recorded under the single method's name for the checks; the
			// summary counts them under the method that carried them.
			method = op.Batch
		}
		c := by[method]
		if c == nil {
			c = &OpCount{Method: method}
			by[method] = c
		}
		if op.Batch != "" {
			if !calls[op.BatchReq] {
				calls[op.BatchReq] = true
				c.Calls++
			}
			if op.Job != "" {
				c.Jobs++
			}
		}
		switch op.Outcome {
		case outcomeOK:
			c.OK++
		case outcomeRefused:
			c.Refused++
			if op.Expect == ExpectRefused {
				c.ExpectedRefusalsRefused++
			}
		default:
			c.Unknown++
		}
	}
	out := make([]OpCount, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Method < out[j].Method })
	return out
}

// Print writes the summary.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "ag-chaos: seed %d, workload %v, took %v\n", r.Seed, r.Duration, r.Elapsed.Round(100*time.Millisecond))

	fmt.Fprintf(w, "\nfaults injected (of %d scheduled):\n", len(r.Schedule))
	for _, k := range FaultKinds {
		fmt.Fprintf(w, "  %-18s %4d\n", k, r.Faults[k])
	}
	for _, e := range r.FaultErrors {
		fmt.Fprintf(w, "  not injected: %s\n", e)
	}

	fmt.Fprintf(w, "\noperations of the recorded clients (ok / refused / no answer; batch calls by item):\n")
	var tot OpCount
	for _, c := range r.Ops {
		var notes []string
		if c.Calls > 0 {
			notes = append(notes, fmt.Sprintf("%d calls, %d jobs", c.Calls, c.Jobs))
		}
		if c.ExpectedRefusalsRefused > 0 {
			notes = append(notes, fmt.Sprintf("%d stale, refused as they must be", c.ExpectedRefusalsRefused))
		}
		extra := ""
		if len(notes) > 0 {
			extra = "   (" + strings.Join(notes, "; ") + ")"
		}
		fmt.Fprintf(w, "  %-18s %6d / %5d / %4d%s\n", c.Method, c.OK, c.Refused, c.Unknown, extra)
		tot.OK, tot.Refused, tot.Unknown = tot.OK+c.OK, tot.Refused+c.Refused, tot.Unknown+c.Unknown
	}
	fmt.Fprintf(w, "  %-18s %6d / %5d / %4d\n", "total", tot.OK, tot.Refused, tot.Unknown)
	fmt.Fprintf(w, "  jobs %d; gated changes integrated %d, rejected %d (%d by a failing validation); free changes integrated %d;\n",
		r.Jobs, r.GatedIntegrated, r.GatedRejected, r.ValidationFailures, r.FreeIntegrated)
	fmt.Fprintf(w, "  ag-worker reports refused as lost claims: %d; audit events %d\n", r.WorkerRefusals, r.AuditEvents)

	fmt.Fprintf(w, "\ninvariants:\n")
	for _, c := range r.Checks {
		mark := "ok  "
		if c.Violations > 0 {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %-42s %s\n", mark, c.Name, c.Checked)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\nnote: %s\n", n)
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(w, "\n%d VIOLATIONS:\n", len(r.Violations))
		for i, v := range r.Violations {
			if i == 50 {
				fmt.Fprintf(w, "  ... and %d more\n", len(r.Violations)-i)
				break
			}
			fmt.Fprintf(w, "  - %s\n", v)
		}
		fmt.Fprintf(w, "\nreproduce with: go run ./cmd/ag-chaos --seed %d --duration %v --keep\n", r.Seed, r.Duration)
	}
	if r.Kept {
		fmt.Fprintf(w, "\nkept %s: logs/ (replicas, workers, postgres), history.jsonl, worker keys, audit.key\n", r.Dir)
	}
	if r.OK() {
		fmt.Fprintf(w, "\nresult: no violation\n")
	} else {
		fmt.Fprintf(w, "\nresult: %d violations\n", len(r.Violations))
	}
}

func (r *Report) String() string {
	var b strings.Builder
	r.Print(&b)
	return b.String()
}
