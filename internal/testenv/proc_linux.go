//go:build linux

package testenv

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL a server if the test binary dies
// without running its cleanups (a panic, a -timeout, kill -9), so crashed
// runs do not leave servers behind. The signal is tied to the OS thread that
// started the child; Go only retires threads of goroutines that exit while
// locked with runtime.LockOSThread, which test goroutines do not do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until pid is actually in the stopped state, because
// SIGSTOP is delivered asynchronously and a test that pauses a server expects
// the very next request to hang.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	path := fmt.Sprintf("/proc/%d/stat", pid)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Format: "pid (comm) S ..."; comm may contain spaces or parens.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			if s := b[i+2]; s == 'T' || s == 't' {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not stopped %v after SIGSTOP", pid, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
