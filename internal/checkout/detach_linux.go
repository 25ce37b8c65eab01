package checkout

import (
	"os/exec"
	"syscall"
)

// detach makes c a process of its own session, which outlives the terminal that started it.
func detach(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }
