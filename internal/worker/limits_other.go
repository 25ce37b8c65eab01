//go:build !linux

package worker

import (
	"errors"
	"runtime"
)

// Cgroups and loop mounts are Linux's: elsewhere a worker holds its runs to no limit but the
// timeout, and says so. The sandbox needs Linux too.

type limiterSys struct{}

type runSys struct{}

// NewLimiter answers a limiter that keeps none of limits, and says why.
func NewLimiter(limits Limits, workDir string) *Limiter {
	why := "cgroups and loop mounts are Linux's, and this is " + runtime.GOOS
	l := &Limiter{}
	for _, name := range []string{limitMemory, limitProcesses, limitCPU, limitDisk} {
		l.status = append(l.status, LimitStatus{Name: name, Why: why})
	}
	return l
}

func (l *Limiter) prepare(runDir string, _ Limits) (*runLimit, error) {
	return &runLimit{root: runDir}, nil
}

func (r *runLimit) join(int) error { return nil }

func (r *runLimit) detach() {}

func (r *runLimit) exceeded() string { return "" }

func (r *runLimit) release() error { return nil }

func (l *Limiter) reapOrphan(string) {}

// FreeBytes is not known here.
func FreeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }
