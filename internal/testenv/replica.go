package testenv

import (
	"strings"
	"testing"
	"time"
)

// RedisReplicaOf starts a private redis-server replicating the master at
// masterAddr ("host:port", which may be a proxy in front of it) and returns
// once the replica reports its link to the master up. extra are more
// redis-server arguments (a bind address, say). The replica is killed when
// the test ends.
func RedisReplicaOf(t testing.TB, masterAddr string, extra ...string) *RedisServer {
	t.Helper()
	skipShort(t, "a redis-server replica")
	requireBinary(t, "redis-server", "redis-server")
	host, port, ok := strings.Cut(masterAddr, ":")
	if !ok {
		t.Fatalf("testenv: master address %q is not host:port", masterAddr)
	}
	r := startRedis(t, func(string, int) ([]string, error) {
		return append([]string{"--replicaof", host, port}, extra...), nil
	})
	deadline := time.Now().Add(readyTimeout)
	for {
		info, err := r.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: replica %s of %s: link not up: %q %v\n%s", r.Addr, masterAddr, info, err, logTail(r.logPath))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// RedisReplica is RedisReplicaOf(t, master.Addr).
func RedisReplica(t testing.TB, master *RedisServer) *RedisServer {
	t.Helper()
	return RedisReplicaOf(t, master.Addr)
}
