//go:build !linux

package testenv

import (
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped cannot observe the process state portably; give the signal a
// moment to land instead.
func waitStopped(pid int, timeout time.Duration) error {
	time.Sleep(50 * time.Millisecond)
	return nil
}
