package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisSentinel starts a private Redis Sentinel (redis-server --sentinel) that
// monitors master under masterName, and waits until it reports the master's
// address. The returned server's Addr is the Sentinel's.
func RedisSentinel(t testing.TB, master *RedisServer, masterName string) *RedisServer {
	t.Helper()
	return RedisSentinelWith(t, SentinelOptions{MasterName: masterName, MasterAddr: master.Addr})
}

// SentinelOptions configure RedisSentinelWith.
type SentinelOptions struct {
	// MasterName is the master set's name; MasterAddr ("127.0.0.1:port")
	// is where the Sentinel reaches the master, and the address it gives
	// clients for it.
	MasterName, MasterAddr string
	// Quorum is how many Sentinels must agree the master is down (default
	// 1).
	Quorum int
	// DownAfter is how long the master may not answer before it is down
	// (default: Sentinel's 30s); FailoverTimeout bounds a failover
	// (default: Sentinel's 3 minutes).
	DownAfter, FailoverTimeout time.Duration
	// Config are more lines of sentinel.conf ("bind 127.0.0.1 127.0.0.2").
	Config []string
	// MasterConfig are lines about the master set, which Sentinel reads
	// only after its monitor line ("sentinel parallel-syncs mymaster 1").
	MasterConfig []string
}

// RedisSentinelWith starts a private Redis Sentinel configured by opts and
// waits until it reports the master's address. The returned server's Addr
// is the Sentinel's, on 127.0.0.1.
func RedisSentinelWith(t testing.TB, opts SentinelOptions) *RedisServer {
	t.Helper()
	masterName := opts.MasterName
	masterHost, masterPort, ok := strings.Cut(opts.MasterAddr, ":")
	if !ok {
		t.Fatalf("testenv: master address %q is not host:port", opts.MasterAddr)
	}
	quorum := max(opts.Quorum, 1)
	skipShort(t, "a Redis Sentinel")
	requireBinary(t, "redis-server", "redis-server")
	dir := t.TempDir()
	s := &RedisServer{t: t, Dir: dir, logPath: filepath.Join(dir, "sentinel.log")}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.stopLocked(); err != nil {
			t.Errorf("testenv: cleanup of sentinel %s: %v", s.Addr, err)
		}
	})
	// Sentinel rewrites its config file, so it must be a writable file of
	// its own.
	conf := filepath.Join(dir, "sentinel.conf")
	// Another process can take the port between FreePort and the bind (on
	// any address the Config binds too), so a bind failure means "pick
	// another port", as in startRedis.
	var p *proc
	var err error
	for range 5 {
		port := FreePort(t)
		lines := []string{fmt.Sprintf("port %d", port), "bind 127.0.0.1", "dir " + dir}
		lines = append(lines, opts.Config...)
		lines = append(lines, fmt.Sprintf("sentinel monitor %s %s %s %d", masterName, masterHost, masterPort, quorum))
		if opts.DownAfter > 0 {
			lines = append(lines, fmt.Sprintf("sentinel down-after-milliseconds %s %d", masterName, opts.DownAfter.Milliseconds()))
		}
		if opts.FailoverTimeout > 0 {
			lines = append(lines, fmt.Sprintf("sentinel failover-timeout %s %d", masterName, opts.FailoverTimeout.Milliseconds()))
		}
		lines = append(lines, opts.MasterConfig...)
		body := strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s.Port, s.Addr, s.args = port, "127.0.0.1:"+strconv.Itoa(port), []string{conf, "--sentinel"}
		if p, err = s.launch(); err == nil || !isAddrInUse(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: starting redis sentinel on %s: %v\n%s", s.Addr, err, logTail(s.logPath))
	}
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()

	deadline := time.Now().Add(readyTimeout)
	for {
		reply, err := redisDo(s.Addr, time.Second, "SENTINEL", "get-master-addr-by-name", masterName)
		if err == nil && strings.Contains(reply, masterPort) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: sentinel %s does not report master %q: %q %v\n%s", s.Addr, masterName, reply, err, logTail(s.logPath))
		}
		time.Sleep(25 * time.Millisecond)
	}
}
