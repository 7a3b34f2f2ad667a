package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// ratelimitProc is the binary running as /bin/ratelimit (ENV mode),
// configured by envoyproxy/ratelimit's variables alone.
type ratelimitProc struct {
	t                   *testing.T
	cmd                 *exec.Cmd
	out                 *testenv.Buffer
	httpAddr, debugAddr string
	grpcAddr            string
	exited              chan error
	stopped             bool
}

// startRatelimit runs path (a copy of the binary named ratelimit) in dir
// with ENV's listener variables on free loopback ports, RUNTIME_ROOT root
// and RUNTIME_SUBDIRECTORY ratelimit, and env; asUnprivileged runs it as uid
// 65534 when the test runs as root. It returns once GET /healthcheck
// answers 200; the process is killed when the test ends.
func startRatelimit(t *testing.T, path, dir, root string, asUnprivileged bool, env ...string) *ratelimitProc {
	t.Helper()
	p := &ratelimitProc{t: t, out: &testenv.Buffer{}, httpAddr: freeAddr(t), debugAddr: freeAddr(t), grpcAddr: freeAddr(t), exited: make(chan error, 1)}
	port := func(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }
	p.cmd = exec.Command(path)
	p.cmd.Dir = dir
	p.cmd.Env = append([]string{
		"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "LOG_LEVEL=debug", "LOG_FORMAT=json",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit",
		"HOST=127.0.0.1", "PORT=" + port(p.httpAddr), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(p.grpcAddr),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + port(p.debugAddr),
	}, env...)
	if asUnprivileged && os.Geteuid() == 0 {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	mustRun(t, p.cmd.Start())
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.stopped {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("/bin/ratelimit output:\n%s", p.out)
		}
	})
	client := &http.Client{Timeout: 10 * time.Second}
	testenv.Eventually(t, 20*time.Second, "/bin/ratelimit answers GET /healthcheck", func() bool {
		select {
		case err := <-p.exited:
			p.stopped = true
			t.Fatalf("/bin/ratelimit exited at start (%v):\n%s", err, p.out)
		default:
		}
		resp, err := client.Get("http://" + p.httpAddr + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// stop sends SIGTERM and wants exit 0 within 20s.
func (p *ratelimitProc) stop() {
	p.t.Helper()
	mustRun(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		p.stopped = true
		if err != nil {
			p.t.Errorf("/bin/ratelimit exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(20 * time.Second):
		p.t.Error("/bin/ratelimit did not stop within 20s of SIGTERM")
	}
}

// copyRatelimit copies the test binary to dir/name, where name is how
// envoyproxy/ratelimit's image names it.
func copyRatelimit(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ratelimit")
	copyFile(t, binary, path, 0o755)
	return path
}
