package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readyTimeout bounds how long a server may take to answer PING. Start-up
// takes milliseconds when idle, but a loaded 2-core CI machine running other
// test binaries can stall it for seconds.
const readyTimeout = 15 * time.Second

// RedisServer is a redis-server process private to one test.
type RedisServer struct {
	// Addr is the server's "127.0.0.1:port".
	Addr string
	// Port is the TCP port in Addr; it stays the same across Stop/Start.
	Port int
	// Dir is the server's working directory; its log is Dir/redis.log.
	Dir string
	// TLSAddr is "127.0.0.1:port" of the TLS listener of RedisTLS; "" for
	// the others.
	TLSAddr string

	t       testing.TB
	logPath string
	args    []string // fixed after the first start so Start reuses the same ports

	mu     sync.Mutex
	p      *proc // nil while stopped
	paused bool
}

// Redis starts a private redis-server on a free loopback port and returns
// once it answers PING. It keeps nothing on disk. The server is killed when
// the test ends. The test fails if redis-server is not on PATH.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	skipShort(t, "a redis-server")
	requireBinary(t, "redis-server", "redis-server")
	return startRedis(t, nil)
}

// RedisWith is Redis started with more redis-server arguments
// ("--min-replicas-to-write", "1"), after the ones that keep it private.
func RedisWith(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	skipShort(t, "a redis-server")
	requireBinary(t, "redis-server", "redis-server")
	return startRedis(t, func(string, int) ([]string, error) { return extra, nil })
}

// RedisTLSFiles are the PEM files of a redis-server's TLS listener.
type RedisTLSFiles struct {
	// Cert and Key are the server's certificate and key.
	Cert, Key string
	// CA holds the CA certificates client certificates must chain to.
	CA string
	// AuthClients requires a client certificate (tls-auth-clients yes).
	AuthClients bool
}

// RedisTLS is Redis with a TLS listener too, on TLSAddr, serving f; the
// plain listener on Addr stays, for the test's own commands and readiness.
func RedisTLS(t testing.TB, f RedisTLSFiles) *RedisServer {
	t.Helper()
	skipShort(t, "a redis-server")
	requireBinary(t, "redis-server", "redis-server")
	var tlsPort int
	s := startRedis(t, func(dir string, port int) ([]string, error) {
		tlsPort = FreePort(t)
		auth := "no"
		if f.AuthClients {
			auth = "yes"
		}
		return []string{"--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", f.Cert, "--tls-key-file", f.Key,
			"--tls-ca-cert-file", f.CA, "--tls-auth-clients", auth}, nil
	})
	s.TLSAddr = "127.0.0.1:" + strconv.Itoa(tlsPort)
	return s
}

// URL returns "redis://127.0.0.1:port/0".
func (s *RedisServer) URL() string { return "redis://" + s.Addr + "/0" }

// Do sends one command on a new connection and returns the reply as a
// string: simple strings, integers and bulk strings as they are, arrays with
// elements joined by "\n". A nil reply gives ErrNil; a Redis error reply
// gives an error with its text.
func (s *RedisServer) Do(args ...string) (string, error) {
	return redisDo(s.Addr, 5*time.Second, args...)
}

// Stop kills the server with SIGKILL and waits for it to exit, to simulate an
// outage. Stopping a stopped server does nothing.
func (s *RedisServer) Stop() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		s.t.Fatalf("testenv: stopping redis-server %s: %v", s.Addr, err)
	}
}

func (s *RedisServer) stopLocked() error {
	if s.p == nil {
		return nil
	}
	err := s.p.kill()
	s.p, s.paused = nil, false
	return err
}

// Start starts a stopped server again on the same port and waits until it
// answers PING. The data set (and script cache) is empty afterwards, as after
// a restart of a server that keeps nothing on disk. A cluster node keeps its
// nodes.conf and so rejoins its cluster with the same slots.
func (s *RedisServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		s.t.Fatalf("testenv: Start on running redis-server %s", s.Addr)
	}
	// The port may have been taken by someone else's outgoing connection
	// while we were down; keep trying it, since clients expect this address.
	deadline := time.Now().Add(readyTimeout)
	for {
		p, err := s.launch()
		if err == nil {
			s.p = p
			return
		}
		if !isAddrInUse(err) || time.Now().After(deadline) {
			s.t.Fatalf("testenv: restarting redis-server on %s: %v\n%s", s.Addr, err, logTail(s.logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pause freezes the server with SIGSTOP, to simulate a hung server: it keeps
// accepting TCP connections (the kernel completes handshakes) but answers
// nothing. Pause returns once the process is actually stopped.
func (s *RedisServer) Pause() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		s.t.Fatalf("testenv: Pause on stopped redis-server %s", s.Addr)
	}
	if err := s.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("testenv: SIGSTOP redis-server %s: %v", s.Addr, err)
	}
	if err := waitStopped(s.p.pid(), 5*time.Second); err != nil {
		s.t.Fatalf("testenv: pausing redis-server %s: %v", s.Addr, err)
	}
	s.paused = true
}

// Resume continues a paused server with SIGCONT and returns once it answers
// PING again. Requests sent while it was paused are then answered.
func (s *RedisServer) Resume() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		s.t.Fatalf("testenv: Resume on stopped redis-server %s", s.Addr)
	}
	if err := s.p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("testenv: SIGCONT redis-server %s: %v", s.Addr, err)
	}
	s.paused = false
	if err := waitRedisReady(s.Addr, s.p); err != nil {
		s.t.Fatalf("testenv: redis-server %s after SIGCONT: %v\n%s", s.Addr, err, logTail(s.logPath))
	}
}

// running reports whether the server has been started and not stopped
// (a paused server is running).
func (s *RedisServer) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p != nil
}

// FlushScripts empties the server's Lua script cache (SCRIPT FLUSH), as a
// restart or failover would, without losing the data.
func (s *RedisServer) FlushScripts() {
	s.t.Helper()
	if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
		s.t.Fatalf("testenv: SCRIPT FLUSH on %s: %v", s.Addr, err)
	}
}

// startRedis starts a new server. extra, if not nil, returns additional
// arguments for the server's directory and port (cluster nodes need
// per-port settings).
func startRedis(t testing.TB, extra func(dir string, port int) ([]string, error)) *RedisServer {
	t.Helper()
	// TempDir before Cleanup: cleanups run last-in first-out, so the
	// process is dead before its directory is removed.
	dir := t.TempDir()
	s := &RedisServer{t: t, Dir: dir, logPath: filepath.Join(dir, "redis.log")}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.stopLocked(); err != nil {
			t.Errorf("testenv: cleanup of redis-server %s: %v", s.Addr, err)
		}
	})

	// Another process can grab the port between FreePort and the bind, so a
	// bind failure means "pick another port", not "fail".
	const attempts = 5
	var lastErr error
	for range attempts {
		port := FreePort(t)
		args := []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--daemonize", "no",
		}
		if extra != nil {
			more, err := extra(dir, port)
			if err != nil {
				t.Fatalf("testenv: %v", err)
			}
			args = append(args, more...)
		}
		s.Port, s.Addr, s.args = port, "127.0.0.1:"+strconv.Itoa(port), args
		p, err := s.launch()
		if err == nil {
			s.mu.Lock()
			s.p = p
			s.mu.Unlock()
			return s
		}
		lastErr = err
		if !isAddrInUse(err) {
			break
		}
	}
	t.Fatalf("testenv: starting redis-server on %s: %v\n%s", s.Addr, lastErr, logTail(s.logPath))
	return nil
}

// launch runs redis-server with s.args and waits for PING. On failure the
// process is gone and the error says whether its port was taken.
func (s *RedisServer) launch() (*proc, error) {
	p, err := startProc(s.logPath, "redis-server", s.args...)
	if err != nil {
		return nil, err
	}
	if err := waitRedisReady(s.Addr, p); err != nil {
		_ = p.kill()
		if strings.Contains(p.logSince(s.logPath), "Address already in use") {
			return nil, &addrInUseError{err}
		}
		return nil, err
	}
	return p, nil
}

type addrInUseError struct{ err error }

func (e *addrInUseError) Error() string { return "address already in use: " + e.err.Error() }

func isAddrInUse(err error) bool {
	_, ok := err.(*addrInUseError)
	return ok
}

// waitRedisReady polls PING until it gets PONG, the process exits, or
// readyTimeout passes. A server still loading answers -LOADING, which counts
// as not ready.
func waitRedisReady(addr string, p *proc) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("redis-server (pid %d) exited before answering PING: %v", p.pid(), p.err)
		}
		reply, err := redisDo(addr, time.Second, "PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("PING answered %q", reply)
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG after %v (pid %d): %v", readyTimeout, p.pid(), last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// skipShort skips t under go test -short, the fast tier that runs only what
// needs no server; the full suite never skips.
func skipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped under -short", what)
	}
}

// requireBinary fails the test, with an install hint, if name is not on
// PATH. Failing rather than skipping keeps a misconfigured machine from
// passing a suite that tested nothing.
func requireBinary(t testing.TB, name, debPackage string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s not found on PATH: install it (Debian: apt-get install %s)", name, debPackage)
	}
}
