package worker

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/internal/size"
)

// A validation command may also try to take its worker's machine down rather than its secrets:
// allocate until the kernel kills something, fork until no process can start, write until the
// disk is full. So each sandboxed run gets a cgroup of its own, made before anything of the
// sandbox runs (limits_linux.go), that holds its memory, its processes and its CPU weight, and a
// file system of its own, of a fixed size, for everything it may write. A run that reaches one
// of these limits is stopped and fails with the reason "worker limit: memory 4 GiB", so that an
// agent reads what it ran into, not a crash; the next run has a cgroup and a file system of its
// own, so it starts as if nothing happened.

// Limits are what one validation run may use of its worker's machine. Zero is no limit.
type Limits struct {
	// Memory is the bytes of memory the run's processes may hold together, page cache they
	// can give back excepted (and without swapping beyond it).
	Memory int64
	// Pids is how many processes, and threads, the run may have at once.
	Pids int64
	// Disk is the bytes the run's writable directories hold together: its checkout, its
	// home, its /tmp and its /dev/shm, and the log of its output.
	Disk int64
}

// DefaultLimits are ag-worker's: enough for `go test -race ./...` of a large module on a
// machine of many cores (the process limit counts threads: a Go compiler runs a few dozen),
// and far from what one run could use to stop a worker's machine.
var DefaultLimits = Limits{Memory: 4 << 30, Pids: 4096, Disk: 8 << 30}

// How often a running validation's limits are looked at. The kernel enforces them as they are
// reached; this is only how soon a run that reached one is stopped.
const limitPollInterval = 100 * time.Millisecond

// overLimitPrefix starts the reason of a run that reached a limit.
const overLimitPrefix = "worker limit: "

// The limits as reasons and logs name them.
const (
	limitMemory    = "memory"
	limitProcesses = "processes"
	limitDisk      = "disk"
	limitCPU       = "cpu weight"
)

// describe answers the limit named as a run's reason names it: "memory 4 GiB".
func (l Limits) describe(name string) string {
	switch name {
	case limitMemory:
		return limitMemory + " " + size.Format(l.Memory)
	case limitProcesses:
		return limitProcesses + " " + strconv.FormatInt(l.Pids, 10)
	case limitDisk:
		return limitDisk + " " + size.Format(l.Disk)
	}
	return name
}

// MinLimits are the least a run is held to, whatever asks for less: bubblewrap and a shell
// need that much to start.
var MinLimits = Limits{Memory: 16 << 20, Pids: 8, Disk: 16 << 20}

// within answers l where it asks for less than max, and max elsewhere: a policy may hold its
// runs to less than the worker's limits, never to more, and never to none. Nothing is held to
// less than MinLimits.
func (l Limits) within(ceiling Limits) Limits {
	lower := func(asked, ceiling, least int64) int64 {
		if asked <= 0 || ceiling > 0 && asked >= ceiling {
			return ceiling
		}
		if asked = max(asked, least); ceiling > 0 {
			asked = min(asked, ceiling)
		}
		return asked
	}
	return Limits{
		Memory: lower(l.Memory, ceiling.Memory, MinLimits.Memory),
		Pids:   lower(l.Pids, ceiling.Pids, MinLimits.Pids),
		Disk:   lower(l.Disk, ceiling.Disk, MinLimits.Disk),
	}
}

// LimitStatus says whether a worker keeps one limit on this machine, and how or why not.
type LimitStatus struct {
	Name  string // memory, processes, cpu weight, disk
	Value string // "4 GiB", "4096"; "" for the CPU weight, the same for every run
	Kept  bool
	Off   bool   // not kept because the worker was given none
	How   string // how it is kept: "cgroup v1 /sys/fs/cgroup/memory/..."
	Why   string // why it is not, when it was asked for
}

// Limiter holds each sandboxed run of a worker within its Limits, as far as its machine lets
// it. Make one with NewLimiter.
type Limiter struct {
	max    Limits // the worker's, as it was given them: prepare keeps those the machine lets it
	status []LimitStatus
	sys    limiterSys // the machine's means (limits_linux.go)
}

// Status answers, for each limit, whether this worker keeps it, and how or why not.
func (l *Limiter) Status() []LimitStatus { return append([]LimitStatus(nil), l.status...) }

// runLimit is one run's cgroup and file system: the run's processes join the one, its
// writable directories are made in the other.
type runLimit struct {
	limits Limits // what this run is held to; zero where it is not
	// root is where the run's writable directories and its output's log go: the root of its
	// own file system when Disk is held (until the sandbox has started: detach), its run
	// directory otherwise.
	root string
	sys  runSys // the cgroup and the mount (limits_linux.go)
}

// String names the run's limits for the worker's log: "memory 4 GiB, processes 4096, disk
// 8 GiB", "none" for one it is not held to.
func (r *runLimit) String() string {
	var parts []string
	for _, name := range []string{limitMemory, limitProcesses, limitDisk} {
		held := map[string]int64{limitMemory: r.limits.Memory, limitProcesses: r.limits.Pids, limitDisk: r.limits.Disk}[name]
		if held > 0 {
			parts = append(parts, r.limits.describe(name))
		} else {
			parts = append(parts, name+" none")
		}
	}
	return strings.Join(parts, ", ")
}

// explain says so when err is the run's disk being too small for what the worker writes
// there before the command runs (its checkout, its copy of the Go build cache seed): the
// worker's failure to run the job, which another worker, with more disk, may run.
func (r *runLimit) explain(err error) error {
	if r == nil || r.limits.Disk == 0 || !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	return fmt.Errorf("the run's disk (%s) cannot hold what the command starts with: %w", size.Format(r.limits.Disk), err)
}

// watch looks at the run's limits until done is closed, and sends the first one it finds
// reached, as describe names it. A nil runLimit has no limit to reach.
func (r *runLimit) watch(done <-chan struct{}) <-chan string {
	if r == nil {
		return nil
	}
	reached := make(chan string, 1)
	go func() {
		tick := time.NewTicker(limitPollInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if what := r.exceeded(); what != "" {
					reached <- what
					return
				}
			}
		}
	}()
	return reached
}

// payloadLimits reads the limits a repository's policy asks for its runs, from the validate
// job's payload: {"limits": {"memory_bytes": N, "pids": N, "disk_bytes": N}}, each optional.
// Numbers may come as JSON numbers or, as protobuf's JSON writes 64-bit integers, as strings.
// A payload without limits asks for none; one whose limits do not parse is refused: running
// it with other limits than its policy says would attest a run that was not asked for.
func payloadLimits(payload *structpb.Struct) (Limits, error) {
	v, ok := payload.GetFields()["limits"]
	if _, null := v.GetKind().(*structpb.Value_NullValue); !ok || null {
		return Limits{}, nil
	}
	fields := v.GetStructValue().GetFields()
	if fields == nil {
		return Limits{}, errors.New("validate payload: limits is not an object")
	}
	var l Limits
	for name, dst := range map[string]*int64{"memory_bytes": &l.Memory, "pids": &l.Pids, "disk_bytes": &l.Disk} {
		f, ok := fields[name]
		if !ok {
			continue
		}
		var n float64
		switch k := f.GetKind().(type) {
		case *structpb.Value_NumberValue:
			n = k.NumberValue
		case *structpb.Value_StringValue:
			parsed, err := strconv.ParseInt(k.StringValue, 10, 64)
			if err != nil {
				return Limits{}, fmt.Errorf("validate payload: limits.%s %q: not an integer", name, k.StringValue)
			}
			n = float64(parsed)
		default:
			return Limits{}, fmt.Errorf("validate payload: limits.%s: not a number", name)
		}
		if n < 0 || n != math.Trunc(n) || n > math.MaxInt64/2 {
			return Limits{}, fmt.Errorf("validate payload: limits.%s %v: not a count of at least 0", name, n)
		}
		*dst = int64(n)
	}
	return l, nil
}
