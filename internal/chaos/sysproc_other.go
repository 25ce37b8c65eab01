//go:build !linux

package chaos

import "syscall"

// sysProcAttr answers the children's attributes: nothing special where there is no
// parent-death signal.
func sysProcAttr() *syscall.SysProcAttr { return nil }
