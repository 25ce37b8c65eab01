package chaos

import "syscall"

// sysProcAttr makes a child die with the harness: a harness killed without cleaning up leaves
// no server or worker behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
