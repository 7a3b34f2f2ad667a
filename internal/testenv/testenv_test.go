package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		p := FreePort(t)
		if seen[p] || p == sharedRedisPort || p <= 0 {
			t.Fatalf("FreePort returned %d (seen before: %v)", p, seen[p])
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d from FreePort not bindable: %v", p, err)
		}
		l.Close()
	}
}

func TestRedis(t *testing.T) {
	s := Redis(t)
	if want := "redis://" + s.Addr + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	if s.Port == sharedRedisPort {
		t.Fatalf("private server on the shared port %d", s.Port)
	}
	mustDo(t, s, "PONG", "PING")
	mustDo(t, s, "OK", "SET", "k", "v")
	mustDo(t, s, "v", "GET", "k")
	// Nothing may be persisted: the server must not write dumps into Dir.
	mustDo(t, s, "save\n", "CONFIG", "GET", "save")
	mustDo(t, s, "appendonly\nno", "CONFIG", "GET", "appendonly")
}

func TestRedisStopStart(t *testing.T) {
	s := Redis(t)
	addr := s.Addr
	mustDo(t, s, "OK", "SET", "k", "v")

	s.Stop()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
	s.Stop() // idempotent

	s.Start()
	if s.Addr != addr {
		t.Fatalf("Addr changed across restart: %s -> %s", addr, s.Addr)
	}
	mustDo(t, s, "PONG", "PING")
	if _, err := s.Do("GET", "k"); !errors.Is(err, ErrNil) {
		t.Fatalf("GET after restart: err = %v, want ErrNil (data should be gone)", err)
	}
}

func TestRedisPauseResume(t *testing.T) {
	s := Redis(t)
	s.Pause()

	// A paused server accepts the connection (the kernel does that) but
	// does not answer.
	c, err := net.DialTimeout("tcp", s.Addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial paused server: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if line, err := r.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("paused server answered %q, %v; want a timeout", line, err)
	}

	s.Resume()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("after Resume: %q, %v; want the pending PING answered", line, err)
	}

	// Stopping a paused server must still work (SIGKILL ends a stopped
	// process); cleanup relies on it too.
	s.Pause()
	s.Stop()
}

func TestRedisFlushScripts(t *testing.T) {
	s := Redis(t)
	sha := mustDo(t, s, "", "SCRIPT", "LOAD", "return 1")
	mustDo(t, s, "1", "SCRIPT", "EXISTS", sha)
	mustDo(t, s, "OK", "SET", "k", "v")
	s.FlushScripts()
	mustDo(t, s, "0", "SCRIPT", "EXISTS", sha)
	mustDo(t, s, "v", "GET", "k") // unlike a restart, data survives
}

func TestRedisCleanupKills(t *testing.T) {
	var addr string
	var pid int
	t.Run("inner", func(t *testing.T) {
		s := Redis(t)
		addr, pid = s.Addr, s.p.pid()
		s.Pause() // cleanup must also end a paused server
	})
	if _, err := redisDo(addr, time.Second, "PING"); err == nil {
		t.Fatalf("server %s still answers after its test ended", addr)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); runtime.GOOS == "linux" && err == nil {
		t.Fatalf("redis-server pid %d still exists after cleanup", pid)
	}
}

func TestRedisMissingBinaryFails(t *testing.T) {
	skipShort(t, "its helper to run: under -short it skips before it could fail")
	t.Setenv("PATH", t.TempDir())
	msg := expectFatal(t, func(tb testing.TB) { Redis(tb) })
	want := "redis-server not found on PATH: install it (Debian: apt-get install redis-server)"
	if msg != want {
		t.Fatalf("Fatalf message = %q, want %q", msg, want)
	}
}

func TestRedisClusterMissingCLIFails(t *testing.T) {
	skipShort(t, "its helper to run: under -short it skips before it could fail")
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(server, filepath.Join(dir, "redis-server")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	msg := expectFatal(t, func(tb testing.TB) { RedisCluster(tb) })
	if !strings.HasPrefix(msg, "redis-cli not found on PATH: install it") {
		t.Fatalf("Fatalf message = %q, want a redis-cli install hint", msg)
	}
}

func TestRedisCluster(t *testing.T) {
	c := RedisCluster(t)
	if len(c.Addrs) != 3 || len(c.Nodes) != 3 {
		t.Fatalf("got %d addrs, %d nodes; want 3", len(c.Addrs), len(c.Nodes))
	}
	if want := "redis-cluster://" + strings.Join(c.Addrs, ","); c.URL() != want {
		t.Errorf("URL() = %q, want %q", c.URL(), want)
	}
	for _, n := range c.Nodes {
		info := mustDo(t, n, "", "CLUSTER", "INFO")
		for _, w := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_size:3"} {
			if !strings.Contains(info, w+"\r\n") {
				t.Errorf("%s CLUSTER INFO lacks %s:\n%s", n.Addr, w, info)
			}
		}
	}

	// These keys hash to slots owned by three different masters.
	keys := map[string]string{"a": "15495", "b": "3300", "c": "7365"}
	for k, slot := range keys {
		mustDo(t, c.Nodes[0], slot, "CLUSTER", "KEYSLOT", k)
	}
	host, port, _ := net.SplitHostPort(c.Addrs[0])
	for k := range keys {
		// -c follows MOVED redirects, so this writes each key on its owner.
		if out := redisCLI(t, "-c", "-h", host, "-p", port, "SET", k, "v-"+k); out != "OK" {
			t.Fatalf("SET %s via redis-cli -c: %q", k, out)
		}
	}
	host, port, _ = net.SplitHostPort(c.Addrs[2])
	for k := range keys {
		if out := redisCLI(t, "-c", "-h", host, "-p", port, "GET", k); out != "v-"+k {
			t.Fatalf("GET %s via redis-cli -c: %q", k, out)
		}
	}

	// A restarted node rejoins with its slots, empty.
	c.Nodes[1].Stop()
	c.Nodes[1].Start()
	c.WaitOK()
	if _, err := c.Nodes[1].Do("GET", "c"); !errors.Is(err, ErrNil) {
		t.Fatalf("GET c on restarted node: %v, want ErrNil", err)
	}
}

func TestRedisClusterWithReplicas(t *testing.T) {
	c := RedisClusterWith(t, ClusterOptions{Replicas: 1})
	if len(c.Nodes) != 6 {
		t.Fatalf("got %d nodes, want 6", len(c.Nodes))
	}
	masters := c.Masters()
	if len(masters) != 3 {
		t.Fatalf("got %d masters, want 3", len(masters))
	}
	// The first master's replica takes over once it stops.
	masters[0].Stop()
	c.WaitOK()
	after := c.Masters()
	if len(after) != 3 {
		t.Fatalf("after a master stopped: %d masters, want 3 (its replica promoted)", len(after))
	}
	for _, m := range after {
		if m == masters[0] {
			t.Fatal("the stopped master is still listed as a master")
		}
	}
}

func TestPostgres(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		dsn := Postgres(t)
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		name = strings.TrimPrefix(u.Path, "/")
		if !strings.HasPrefix(name, "sluice_test_") {
			t.Fatalf("database name %q lacks the sluice_test_ prefix", name)
		}
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect to %s: %v", dsn, err)
		}
		// Deliberately left open until after the drop: WITH (FORCE) must
		// cope with connections a test forgot to close.
		t.Cleanup(func() { conn.Close(context.Background()) })

		var got string
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&got); err != nil || got != name {
			t.Fatalf("current_database() = %q, %v; want %q", got, err, name)
		}
		var tables int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil || tables != 0 {
			t.Fatalf("fresh database has %d tables (%v), want 0", tables, err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int primary key); INSERT INTO t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
	})

	admin := os.Getenv(PostgresEnv)
	if admin == "" {
		admin = DefaultPostgresDSN
	}
	conn, err := pgx.Connect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestPostgresUnreachableFails(t *testing.T) {
	skipShort(t, "its helper to run: under -short it skips before it could fail")
	old := pgConnectTimeout
	pgConnectTimeout = time.Second
	defer func() { pgConnectTimeout = old }()
	t.Setenv(PostgresEnv, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", FreePort(t)))
	msg := expectFatal(t, func(tb testing.TB) { Postgres(tb) })
	for _, w := range []string{"PostgreSQL must be running", PostgresEnv + "="} {
		if !strings.Contains(msg, w) {
			t.Fatalf("Fatalf message lacks %q:\n%s", w, msg)
		}
	}
}

func TestWithDatabase(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:p@h:5433/test?sslmode=disable",
		"host=h port=5433 user=u password=p dbname=test sslmode=disable",
	} {
		got, err := withDatabase(dsn, "other")
		if err != nil {
			t.Fatalf("withDatabase(%q): %v", dsn, err)
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil {
			t.Fatalf("ParseConfig(%q): %v", got, err)
		}
		if cfg.Database != "other" || cfg.Host != "h" || cfg.Port != 5433 || cfg.User != "u" || cfg.Password != "p" {
			t.Errorf("withDatabase(%q) = %q: parsed as db=%q host=%q port=%d user=%q", dsn, got, cfg.Database, cfg.Host, cfg.Port, cfg.User)
		}
	}
}

// mustDo runs a command and, unless want is "", checks the reply.
func mustDo(t *testing.T, s *RedisServer, want string, args ...string) string {
	t.Helper()
	got, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), s.Addr, err)
	}
	if want != "" && got != want {
		t.Fatalf("%s on %s = %q, want %q", strings.Join(args, " "), s.Addr, got, want)
	}
	return got
}

func redisCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// fatalRecorder captures the message a helper fails with, so the failure
// paths can be tested without failing this test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

// expectFatal runs fn in its own goroutine (Fatalf ends it with Goexit) and
// returns the message fn failed with; it fails t if fn did not fail.
func expectFatal(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rec)
	}()
	<-done
	if rec.msg == "" {
		t.Fatal("helper did not fail")
	}
	return rec.msg
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	tries := 0
	Eventually(t, time.Minute, "the third try", func() bool { tries++; return tries == 3 })
	if tries != 3 {
		t.Fatalf("cond called %d times, want 3", tries)
	}
}

func TestEventuallyFailsAtTheDeadline(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) {
		Eventually(tb, 20*time.Millisecond, "a condition that never holds", func() bool { return false })
	})
	if !strings.Contains(msg, "a condition that never holds: not within 20ms") {
		t.Fatalf("failure message %q", msg)
	}
}
