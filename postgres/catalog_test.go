package postgres_test

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicelabs/sluice"

	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/postgres"
)

func TestCatalogContract(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalogtest.Open {
		dsn := testenv.Postgres(t)
		return func(t *testing.T) catalogtest.Catalog {
			c, err := postgres.Open(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	})
}

// A watcher whose listening connection is killed still sees changes within a
// second: the periodic version check covers the gap and the listener
// reconnects.
func TestWatchSurvivesLostListenConnection(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.Postgres(t)
	open := func() *postgres.Catalog {
		c, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	writer, watcher := open(), open()
	if err := writer.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	versions := make(chan int64, 100)
	watchCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- watcher.Watch(watchCtx, func(e sluice.Event) { versions <- e.Version }) }()
	defer func() { cancel(); <-done }()
	<-versions // the initial event

	killListeners := func() {
		t.Helper()
		admin, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		// Wait until the listener is up, so there is something to kill.
		testenv.Eventually(t, 10*time.Second, "a LISTEN connection to kill", func() bool {
			var killed int
			err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%'`).Scan(&killed)
			if err != nil {
				t.Fatal(err)
			}
			return killed > 0
		})
	}
	for i, name := range []string{"acme", "beta", "gamma"} {
		killListeners()
		if _, err := writer.CreateTenant(ctx, name); err != nil {
			t.Fatal(err)
		}
		want, err := writer.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(time.Second)
		for got := int64(0); got < want; {
			select {
			case got = <-versions:
			case <-timeout:
				t.Fatalf("round %d: change not seen within 1s after the listening connection was killed", i+1)
			}
		}
	}
}

// Lists come out in the byte order of names even on a database whose
// collation skips punctuation, as glibc's en_US.UTF-8 (a common production
// default) does: there "ab" sorts before "a-c", unlike on SQLite.
func TestListsInByteOrderUnderAPunctuationBlindCollation(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.Postgres(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin := os.Getenv(testenv.PostgresEnv)
	if admin == "" {
		admin = testenv.DefaultPostgresDSN
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Recreate testenv's database (which it drops at the end) with an ICU
	// collation that ignores '-' at the first level.
	db := pgx.Identifier{cfg.Database}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db+" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US-u-ka-shifted' LOCALE 'C.UTF-8'"); err != nil {
		t.Skipf("this server cannot create an ICU database: %v", err)
	}
	c, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	names := []string{"ab", "a-c", "a0", "a-b"}
	for _, n := range names {
		if _, err := c.CreateTenant(ctx, n); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PutRule(ctx, sluice.Rule{Tenant: "ab", Name: n, Route: "/" + n, Limits: []sluice.Limit{sluice.PerSecond(1)}}); err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Sorted(slices.Values(names))
	tenants, err := c.Tenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.Rules(ctx, "ab")
	if err != nil {
		t.Fatal(err)
	}
	var gotTenants, gotRules []string
	for i := range tenants {
		gotTenants, gotRules = append(gotTenants, tenants[i].Name), append(gotRules, rules[i].Name)
	}
	if !slices.Equal(gotTenants, want) || !slices.Equal(gotRules, want) {
		t.Fatalf("Tenants %v, Rules %v; want both %v", gotTenants, gotRules, want)
	}
}

// freezer is a TCP proxy whose connections can be frozen: after Freeze they
// stay open but carry nothing more, as after a network partition or a
// failover to another primary (no RST, no FIN). Connections made after
// Freeze work.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	gen    int // connections of an older generation are frozen
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		f.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			f.mu.Lock()
			gen := f.gen
			f.conns = append(f.conns, client, server)
			f.mu.Unlock()
			wg.Go(func() { f.pipe(gen, server, client) })
			wg.Go(func() { f.pipe(gen, client, server) })
		}
	})
	return f
}

// pipe copies src to dst until src fails, dropping what it reads once its
// generation is frozen; then it closes dst, passing the close on.
func (f *freezer) pipe(gen int, dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		f.mu.Lock()
		frozen := gen < f.gen
		f.mu.Unlock()
		if frozen {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// Close closes the proxy and its connections, so that their clients see
// them fail at once rather than wait out their timeouts.
func (f *freezer) Close() {
	_ = f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		_ = c.Close()
	}
}

// Freeze freezes every connection open now.
func (f *freezer) Freeze() {
	f.mu.Lock()
	f.gen++
	f.mu.Unlock()
}

// A watcher whose connections all go silent (no error, no close: what a
// failover or a partition looks like) still sees changes once the database
// is reachable again, instead of waiting for TCP to give up (many minutes),
// all the while accepting keys that were revoked.
func TestWatchRecoversFromSilentConnections(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.Postgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFreezer(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	open := func(dsn string) *postgres.Catalog {
		c, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	writer, watcher := open(dsn), open(u.String())
	if err := writer.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	var failures atomic.Int64
	watcher.ReportWatchErrors(slog.New(slog.NewJSONHandler(&logs, nil)), func() { failures.Add(1) })
	defer proxy.Close() // before the catalogs close
	versions := make(chan int64, 100)
	watchCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- watcher.Watch(watchCtx, func(e sluice.Event) { versions <- e.Version }) }()
	defer func() { cancel(); <-done }()
	<-versions // the initial event

	seen := func(what string, within time.Duration) {
		t.Helper()
		want, err := writer.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(within)
		for got := int64(0); got < want; {
			select {
			case got = <-versions:
			case <-timeout:
				t.Fatalf("%s: version %d not seen within %v", what, want, within)
			}
		}
	}
	if _, err := writer.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	seen("before the freeze", time.Second)
	proxy.Freeze()
	if _, err := writer.CreateTenant(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	seen("after the freeze", 10*time.Second)
	// The looks that timed out on frozen connections were counted, and
	// logged once each, not once per look.
	if failures.Load() == 0 || !strings.Contains(logs.String(), "catalog watch failed") {
		t.Errorf("%d watch failures counted; log:\n%s", failures.Load(), logs.String())
	}
	if n, f := int64(strings.Count(logs.String(), "catalog watch failed")), failures.Load(); n > f {
		t.Errorf("%d failures logged %d times", f, n)
	}
}

// TestReadOnlyCatalog: a database in read-only mode reads as ever and
// refuses every change with sluice.ErrCatalogReadOnly.
func TestReadOnlyCatalog(t *testing.T) {
	catalogtest.RunReadOnly(t, catalogtest.ReadOnlyPostgres(t, testenv.Postgres(t), catalogtest.SeedTenant(t)))
}
