//go:build !linux

package cli

import (
	"errors"
	"os"
)

// haveOpenat2: openat2 is Linux's; elsewhere a checkoutReader checks each parent itself.
func haveOpenat2() bool { return false }

func openBeneath(int, string) (*os.File, error) { return nil, errors.ErrUnsupported }

func readlinkBeneath(int, string) (string, error) { return "", errors.ErrUnsupported }
