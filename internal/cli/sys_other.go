//go:build !linux

package cli

import (
	"io"
	"os"
	"os/exec"
)

// isTerminal reports whether w is a character device other than the null device: a terminal,
// as far as can be told without a terminal library.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	if err != nil || info.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(info, null)
}

// watchSupported: elsewhere than Linux, watching a checkout takes a watch per file (kqueue) or
// is not built; scans stat every file.
const watchSupported = false

func detach(*exec.Cmd) {}
