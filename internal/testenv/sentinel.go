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
	port := FreePort(t)
	// Sentinel rewrites its config file, so it must be a writable file of
	// its own.
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n", port, dir, masterName, master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s.Port, s.Addr, s.args = port, "127.0.0.1:"+strconv.Itoa(port), []string{conf, "--sentinel"}
	p, err := s.launch()
	if err != nil {
		t.Fatalf("testenv: starting redis sentinel on %s: %v\n%s", s.Addr, err, logTail(s.logPath))
	}
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()

	deadline := time.Now().Add(readyTimeout)
	for {
		reply, err := redisDo(s.Addr, time.Second, "SENTINEL", "get-master-addr-by-name", masterName)
		if err == nil && strings.Contains(reply, strconv.Itoa(master.Port)) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: sentinel %s does not report master %q: %q %v\n%s", s.Addr, masterName, reply, err, logTail(s.logPath))
		}
		time.Sleep(25 * time.Millisecond)
	}
}
