package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"
)

// FaultKind names a kind of fault the harness injects.
type FaultKind string

// The faults, in the order the summary lists them.
const (
	FaultKillWorker      FaultKind = "kill-worker"      // SIGKILL an ag-worker, start it again after Hold
	FaultStopWorker      FaultKind = "stop-worker"      // SIGSTOP an ag-worker for Hold (longer than its claim lease), then SIGCONT
	FaultKillReplica     FaultKind = "kill-replica"     // SIGKILL an ag serve replica, start it again after Hold
	FaultStopReplica     FaultKind = "stop-replica"     // SIGSTOP a replica for Hold, then SIGCONT
	FaultRestartPostgres FaultKind = "restart-postgres" // pg_ctl restart -m immediate: every connection is cut
	FaultExpireClaim     FaultKind = "expire-claim"     // a recorded worker pauses past its claim's lease; another claim takes the job
	FaultExpireLease     FaultKind = "expire-lease"     // an agent pauses past its file lease; another agent is granted the path
)

// FaultKinds are every kind, in the summary's order.
var FaultKinds = []FaultKind{FaultKillWorker, FaultStopWorker, FaultKillReplica, FaultStopReplica,
	FaultRestartPostgres, FaultExpireClaim, FaultExpireLease}

// Fault is one fault of a schedule.
type Fault struct {
	At     time.Duration // after the workload started
	Kind   FaultKind
	Target int           // the worker, replica or agent it hits
	Hold   time.Duration // how long the target stays down or paused
}

func (f Fault) String() string {
	s := fmt.Sprintf("%6.1fs %-16s", f.At.Seconds(), f.Kind)
	switch f.Kind {
	case FaultKillWorker, FaultStopWorker:
		s += fmt.Sprintf(" worker w%d for %v", f.Target+1, f.Hold)
	case FaultKillReplica, FaultStopReplica:
		s += fmt.Sprintf(" replica r%d for %v", f.Target+1, f.Hold)
	case FaultExpireLease:
		s += fmt.Sprintf(" agent-%d", f.Target+1)
	}
	return strings.TrimRight(s, " ")
}

// minPostgresRestart is the shortest run that restarts PostgreSQL: the replicas need a few
// seconds to find it back, and the run some more to show they did.
const minPostgresRestart = 20 * time.Second

// faultStreams are the schedule's independent streams: each runs its faults one after the
// other, so that a stream never has two of its targets down at once (one replica down at most,
// one worker down at most).
const (
	streamServers = iota // replicas and PostgreSQL
	streamWorkers
	streamActors // expiries of recorded workers' claims and agents' leases
)

// Schedule answers the faults of a run of duration d, from seed alone: the same seed and
// sizes give the same schedule. Every kind comes once before any comes twice (PostgreSQL is
// restarted once, when d allows), so a short run still injects each; faults end a few seconds
// before d, so the last one is recovered from inside the run.
func Schedule(seed uint64, d time.Duration, replicas, workers, agents int) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x6167636861))
	end := d - 4*time.Second
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)).Round(100*time.Millisecond)
	}
	var out []Fault
	plan := func(start time.Duration, first []FaultKind, more []FaultKind, next func(k FaultKind) (Fault, time.Duration)) {
		rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
		at := start
		for i := 0; ; i++ {
			var k FaultKind
			if i < len(first) {
				k = first[i]
			} else {
				k = more[rng.IntN(len(more))]
			}
			f, busy := next(k)
			if at+busy > end {
				return
			}
			f.At, f.Kind = at, k
			out = append(out, f)
			at += busy + between(1500*time.Millisecond, 4*time.Second)
		}
	}
	// Servers: one replica or PostgreSQL at a time; a replica is down for 1-3 s.
	serverKinds := []FaultKind{FaultKillReplica, FaultStopReplica}
	if d >= minPostgresRestart {
		serverKinds = append(serverKinds, FaultRestartPostgres)
	}
	plan(2*time.Second, serverKinds, []FaultKind{FaultKillReplica, FaultStopReplica}, func(k FaultKind) (Fault, time.Duration) {
		if k == FaultRestartPostgres {
			return Fault{}, 4 * time.Second
		}
		hold := between(time.Second, 3*time.Second)
		return Fault{Target: rng.IntN(replicas), Hold: hold}, hold + 2*time.Second
	})
	// Workers: a pause outlasts the 2 s claim lease, so its claims go to others.
	plan(1500*time.Millisecond, []FaultKind{FaultKillWorker, FaultStopWorker}, []FaultKind{FaultKillWorker, FaultStopWorker}, func(k FaultKind) (Fault, time.Duration) {
		hold := between(500*time.Millisecond, 2*time.Second)
		if k == FaultStopWorker {
			hold = between(2500*time.Millisecond, 5*time.Second)
		}
		return Fault{Target: rng.IntN(workers), Hold: hold}, hold + time.Second
	})
	// Actors: a scenario takes about 4 s.
	plan(2500*time.Millisecond, []FaultKind{FaultExpireClaim, FaultExpireLease}, []FaultKind{FaultExpireClaim, FaultExpireLease}, func(k FaultKind) (Fault, time.Duration) {
		f := Fault{}
		if k == FaultExpireLease {
			f.Target = rng.IntN(agents)
		}
		return f, 4 * time.Second
	})
	sortFaults(out)
	return out
}

func sortFaults(fs []Fault) {
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].At < fs[j-1].At; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
}

func streamOf(k FaultKind) int {
	switch k {
	case FaultKillWorker, FaultStopWorker:
		return streamWorkers
	case FaultExpireClaim, FaultExpireLease:
		return streamActors
	}
	return streamServers
}

// scenarioContext lets an expiry scenario that began finish even when the workload ends
// meanwhile (it takes a few seconds, more when a replica is down), within a bound; only the
// run's own end (an interrupt) cuts it short.
func (r *run) scenarioContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.root, 90*time.Second)
}

// injected is one fault as it happened.
type injected struct {
	Fault
	Started time.Time
	Err     error
}

// inject runs the faults of one stream at their times (or as soon as the previous one of the
// stream recovered), until ctx ends. Every fault is recovered from before inject returns:
// paused processes are continued and killed ones started again.
func (r *run) inject(ctx context.Context, faults []Fault, start time.Time) {
	for _, f := range faults {
		if wait := time.Until(start.Add(f.At)); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		} else if ctx.Err() != nil {
			return
		}
		in := injected{Fault: f, Started: time.Now()}
		in.Err = r.injectOne(ctx, f)
		r.recordFault(in)
	}
}

func (r *run) injectOne(ctx context.Context, f Fault) error {
	hold := func() {
		// The hold is not cut short by ctx: what is down comes back up as planned.
		time.Sleep(f.Hold)
	}
	switch f.Kind {
	case FaultKillWorker:
		w := r.workers[f.Target]
		r.logf("fault: SIGKILL %s, start again in %v", w.name, f.Hold)
		w.kill()
		hold()
		return r.startWorker(context.WithoutCancel(ctx), f.Target)
	case FaultStopWorker:
		w := r.workers[f.Target]
		r.logf("fault: SIGSTOP %s for %v", w.name, f.Hold)
		if err := w.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		hold()
		return w.signal(syscall.SIGCONT)
	case FaultKillReplica:
		p := r.replicas[f.Target]
		r.logf("fault: SIGKILL %s, start again in %v", p.name, f.Hold)
		p.kill()
		hold()
		return r.startReplica(context.WithoutCancel(ctx), f.Target)
	case FaultStopReplica:
		p := r.replicas[f.Target]
		r.logf("fault: SIGSTOP %s for %v", p.name, f.Hold)
		if err := p.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		hold()
		return p.signal(syscall.SIGCONT)
	case FaultRestartPostgres:
		r.logf("fault: restart PostgreSQL (immediate)")
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
		defer cancel()
		return r.pg.Restart(rctx)
	case FaultExpireClaim:
		r.logf("fault: a recorded worker pauses past its claim's lease")
		sctx, cancel := r.scenarioContext()
		defer cancel()
		return r.prober.expireClaim(sctx)
	case FaultExpireLease:
		r.logf("fault: agent-%d pauses past its lease", f.Target+1)
		sctx, cancel := r.scenarioContext()
		defer cancel()
		return r.agents[f.Target].expireLease(sctx, r.agents[(f.Target+1)%len(r.agents)])
	}
	return fmt.Errorf("unknown fault %q", f.Kind)
}
