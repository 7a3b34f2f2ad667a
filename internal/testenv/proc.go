package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

var errNoFreshPort = errors.New("kernel kept returning ports already handed out")

// proc is one run of a server process that we started ourselves. Only this
// handle is ever used to signal it, so we can never kill someone else's
// server.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait has returned
	err  error         // Wait's result; read only after done is closed
	// logStart is the log file's size before this run began, so failure
	// analysis looks only at what this run wrote.
	logStart int64
}

// startProc starts name with args, appending stdout and stderr to logPath.
func startProc(logPath, name string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	fmt.Fprintf(f, "=== testenv %s: %s %s\n", time.Now().Format(time.RFC3339Nano), name, quoteArgs(args))
	cmd := exec.Command(name, args...)
	cmd.Stdout = f // an *os.File is handed to the child directly: no copying goroutine
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), logStart: st.Size()}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (which also ends a SIGSTOPped process) and waits for the
// process to be reaped, so its ports are free when kill returns.
func (p *proc) kill() error {
	_ = p.cmd.Process.Kill() // os.ErrProcessDone if it already exited: fine
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		return fmt.Errorf("pid %d did not exit 15s after SIGKILL", p.pid())
	}
}

// logSince returns what this run wrote to its log.
func (p *proc) logSince(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil || int64(len(b)) < p.logStart {
		return ""
	}
	return string(b[p.logStart:])
}

// logTail returns the last lines of a log file for a failure message.
func logTail(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log %s: %v)", logPath, err)
	}
	const maxBytes, maxLines = 4096, 40
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return fmt.Sprintf("--- last lines of %s ---\n%s\n---", logPath, strings.Join(lines, "\n"))
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = fmt.Sprintf("%q", a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
