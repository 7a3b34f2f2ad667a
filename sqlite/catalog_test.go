package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/internal/migrations"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/sqlite"
	"github.com/sluicelabs/sluice/usage"
)

func TestCatalogContract(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalogtest.Open {
		path := filepath.Join(t.TempDir(), "catalog.db")
		return func(t *testing.T) catalogtest.Catalog {
			c, err := sqlite.Open(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	})
}

// Environment of the writer process TestTwoProcessesWriteOneFile starts.
const (
	writerPathEnv = "SLUICE_TEST_SQLITE_WRITER_PATH"
	writerNameEnv = "SLUICE_TEST_SQLITE_WRITER_NAME"
)

// writes is how many changes each process makes.
const writes = 60

// writeMany makes writes changes as fast as it can, each a transaction that
// takes the file's write lock, plus a read after each.
func writeMany(ctx context.Context, path, name string) error {
	c, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	for i := range writes {
		tenant := name + "-" + strconv.Itoa(i)
		if _, err := c.CreateTenant(ctx, tenant); err != nil {
			return fmt.Errorf("CreateTenant %s: %w", tenant, err)
		}
		if _, err := c.Snapshot(ctx); err != nil {
			return fmt.Errorf("Snapshot: %w", err)
		}
	}
	return nil
}

// Two processes hammering one fresh file (the embedded default run twice,
// or `sluice tenant create` while `sluice serve` runs) wait for each other's
// locks: SQLITE_BUSY never reaches a caller, nothing is lost.
func TestTwoProcessesWriteOneFile(t *testing.T) {
	if path := os.Getenv(writerPathEnv); path != "" {
		// The second process.
		if err := writeMany(context.Background(), path, os.Getenv(writerNameEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	path := filepath.Join(t.TempDir(), "catalog.db")
	other := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestTwoProcessesWriteOneFile$")
	other.Env = append(os.Environ(), writerPathEnv+"="+path, writerNameEnv+"=child")
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = other.CombinedOutput()
		done <- err
	}()
	if err := writeMany(t.Context(), path, "parent"); err != nil {
		t.Errorf("this process: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the other process: %v\n%s", err, out)
	}
	c, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tenants, err := c.Tenants(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(tenants) != 2*writes {
		t.Fatalf("%d tenants; want %d", len(tenants), 2*writes)
	}
	if v, err := c.Version(t.Context()); err != nil || v != 2*writes {
		t.Fatalf("version %d, %v; want %d", v, err, 2*writes)
	}
}

// A path is a path: '%' and spaces in it are not URI escapes.
func TestOpenUsesThePathAsGiven(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a%20b.db", "100%.db", "x y.db"} {
		path := filepath.Join(dir, name)
		c, err := sqlite.Open(t.Context(), path)
		if err != nil {
			t.Fatalf("Open(%q): %v", name, err)
		}
		err = c.Migrate(t.Context())
		_ = c.Close()
		if err != nil {
			t.Fatalf("Migrate %q: %v", name, err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("Open(%q) did not create that file: %v", name, err)
		}
	}
}

// A change feed that keeps failing logs its error once, counts every
// failure, says when it recovers, and then reports changes again.
func TestWatchErrorsAreLoggedOnceAndCounted(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "catalog.db")
	c := openMigrated(t, path)
	var logs testenv.Buffer
	var failures atomic.Int64
	c.ReportWatchErrors(slog.New(slog.NewJSONHandler(&logs, nil)), func() { failures.Add(1) })
	versions := make(chan int64, 100)
	watchCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Watch(watchCtx, func(e sluice.Event) { versions <- e.Version }) }()
	defer func() { cancel(); <-done }()
	<-versions // the initial event

	// Another connection hides the table every look reads.
	db, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	run("ALTER TABLE catalog_state RENAME TO catalog_state_hidden")
	testenv.Eventually(t, 10*time.Second, "three failed looks", func() bool { return failures.Load() >= 3 })
	if n := strings.Count(logs.String(), "catalog watch failed"); n != 1 {
		t.Fatalf("%d failures logged %d times; want once:\n%s", failures.Load(), n, logs.String())
	}
	if !strings.Contains(logs.String(), "no such table: catalog_state") || !strings.Contains(logs.String(), "read catalog changes") {
		t.Errorf("the log does not say what failed:\n%s", logs.String())
	}

	run("ALTER TABLE catalog_state_hidden RENAME TO catalog_state")
	testenv.Eventually(t, 10*time.Second, "the recovery logged", func() bool { return strings.Contains(logs.String(), "catalog watch recovered") })
	counted := failures.Load()
	tenant, err := c.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for v := int64(0); v < tenant.Generation; {
		select {
		case v = <-versions:
		case <-time.After(5 * time.Second):
			t.Fatalf("version %d not reported after the recovery", tenant.Generation)
		}
	}
	if failures.Load() != counted {
		t.Errorf("failures counted after the recovery: %d, then %d", counted, failures.Load())
	}
}

// Upgrading keeps the counters of tenants that existed before generations
// were recorded: their namespace stays name and creation time. Tenants
// created after the upgrade get a generation.
func TestUpgradeKeepsExistingTenantsCounterNamespace(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "catalog.db")
	steps, err := migrations.For(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	// A catalog as the first release left it: step 1 and one tenant.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		steps[0].SQL,
		"CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)",
		"INSERT INTO schema_migrations VALUES (1, 'catalog', 0)",
		"INSERT INTO tenants (name, status, created_at_ms) VALUES ('acme', 'active', 1764608400123)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	c := openMigrated(t, path)
	acme, err := c.Tenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := acme.CounterNamespace(); got != "acme@1764608400123" {
		t.Errorf("an existing tenant's namespace after the upgrade: %q; want acme@1764608400123", got)
	}
	beta, err := c.CreateTenant(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if beta.Generation <= 0 || beta.CounterNamespace() != fmt.Sprintf("beta#%d", beta.Generation) {
		t.Errorf("a new tenant: generation %d, namespace %q", beta.Generation, beta.CounterNamespace())
	}
}

// openMigrated opens and migrates the catalog file at path, closing it when
// t ends.
func openMigrated(t *testing.T, path string) *sqlite.Catalog {
	t.Helper()
	c, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReadOnlyCatalog: a catalog file that cannot be written reads as ever
// and refuses every change with sluice.ErrCatalogReadOnly.
func TestReadOnlyCatalog(t *testing.T) {
	catalogtest.RunReadOnly(t, catalogtest.ReadOnlySQLite(t, catalogtest.SeedTenant(t)))
}

// Upgrading to usage series keeps the rollups stored before: each minute
// as it was, and the hours and days summed from them.
func TestUpgradeKeepsUsageRollups(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "catalog.db")
	steps, err := migrations.For(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	// The catalog as 0008 (per-minute rows keyed by text) left it.
	for _, s := range steps {
		if s.Version > 8 {
			break
		}
		if _, err := db.ExecContext(ctx, s.SQL); err != nil {
			t.Fatalf("step %d: %v", s.Version, err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO schema_migrations VALUES ($1, $2, 0)", s.Version, s.Name); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2026, 12, 1, 23, 59, 0, 0, time.UTC) // the last minute of a day, then the next day's first
	for i, ns := range []string{"acme@1", "acme@1", "beta@2"} {
		minute := base.Add(time.Duration(i%2) * time.Minute)
		if _, err := db.ExecContext(ctx, `INSERT INTO usage_minutes (namespace, rule, minute_ms, allowed, denied, units)
			VALUES ($1, 'api', $2, $3, 1, $4)`, ns, minute.UnixMilli(), 10*(i+1), 20*(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	c := openMigrated(t, path)
	read := func(ns string, step usage.Step) string {
		rows, err := c.ReadUsage(ctx, usage.Query{Namespace: ns, Step: step, From: base.Add(-24 * time.Hour), To: base.Add(24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, fmt.Sprintf("%s %s %d/%d/%d", r.Start.Format("01-02T15:04"), r.Rule, r.Allowed, r.Denied, r.Units))
		}
		return strings.Join(out, ", ")
	}
	for _, c := range []struct {
		ns   string
		step usage.Step
		want string
	}{
		{"acme@1", usage.StepMinute, "12-01T23:59 api 10/1/20, 12-02T00:00 api 20/1/40"},
		{"acme@1", usage.StepHour, "12-01T23:00 api 10/1/20, 12-02T00:00 api 20/1/40"},
		{"acme@1", usage.StepDay, "12-01T00:00 api 10/1/20, 12-02T00:00 api 20/1/40"},
		{"beta@2", usage.StepDay, "12-01T00:00 api 30/1/60"},
	} {
		if got := read(c.ns, c.step); got != c.want {
			t.Errorf("%s by %s after the upgrade: %s; want %s", c.ns, c.step, got, c.want)
		}
	}
}
