//go:build !linux

package checkout

import (
	"errors"
	"io"
	"os"
)

// haveOpenat2: openat2 is Linux's; elsewhere a checkoutReader checks each parent itself.
func haveOpenat2() bool { return false }

func openBeneath(int, string) (*os.File, error) { return nil, errors.ErrUnsupported }

func readlinkBeneath(int, string) (string, error) { return "", errors.ErrUnsupported }

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
