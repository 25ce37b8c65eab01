//go:build !linux

package worker

import (
	"errors"
	"runtime"
	"time"
)

func sandboxSupported() error {
	return errors.New("the bubblewrap sandbox needs Linux, and this is " + runtime.GOOS)
}

func pidNamespace(string) (uint64, error) { return 0, errors.ErrUnsupported }

func endNamespace(int, uint64, time.Duration) bool { return true }

func closeInheritedOnExec() error { return nil }

// oNoFollow: no sandbox, so no seed to copy, here.
const oNoFollow = 0
