package catalogtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/postgres"
	"github.com/sluicelabs/sluice/sqlite"
)

// ReadOnlySQLite returns a migrated SQLite catalog, first filled by seed,
// whose file can no longer be written: immutable (chattr +i) when the test
// runs as root, whom file modes do not stop, read-only by mode otherwise.
// SQLite then opens it for reading only, and refuses every write with
// SQLITE_READONLY, as on a read-only volume.
func ReadOnlySQLite(t *testing.T, seed func(Catalog)) *sqlite.Catalog {
	t.Helper()
	path := filepath.Join(t.TempDir(), "catalog.db")
	c, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	seed(c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
			t.Skipf("cannot make %s read-only for root (chattr +i: %v %s)", path, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
	} else if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	ro, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	return ro
}

// ReadOnlyPostgres returns a migrated PostgreSQL catalog on the database of
// dsn, first filled by seed, whose sessions are read-only
// (default_transaction_read_only, as an operator freezes a database or a
// standby answers): every write is refused with SQLSTATE 25006.
func ReadOnlyPostgres(t *testing.T, dsn string, seed func(Catalog)) *postgres.Catalog {
	t.Helper()
	ctx := t.Context()
	c, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	seed(c)
	c.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	err = conn.QueryRow(ctx, "SELECT current_database()").Scan(&name)
	if err == nil {
		_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET default_transaction_read_only = on")
	}
	_ = conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	return ro
}

// SeedTenant creates tenant "acme", as an operator: a seed for the read-only
// catalogs.
func SeedTenant(t *testing.T) func(Catalog) {
	return func(c Catalog) {
		t.Helper()
		if _, err := c.CreateTenant(sluice.WithActor(context.Background(), sluice.ActorOperator), "acme"); err != nil {
			t.Fatal(err)
		}
	}
}

// RunReadOnly holds c, a catalog seeded with SeedTenant on a database that
// cannot write, to the contract of one: it reads as before, and refuses
// every change, the write probe included, with sluice.ErrCatalogReadOnly,
// changing nothing.
func RunReadOnly(t *testing.T, c Catalog) {
	ctx := sluice.WithActor(t.Context(), sluice.ActorOperator)
	if ts, err := c.Tenants(ctx); err != nil || len(ts) != 1 || ts[0].Name != "acme" {
		t.Fatalf("Tenants of a read-only catalog: %v, %v; want acme, read as ever", ts, err)
	}
	changes := []struct {
		name string
		err  error
	}{
		{"CreateTenant", second(c.CreateTenant(ctx, "other"))},
		{"PutRule", second(c.PutRule(ctx, rule("acme", "api", "*", sluice.FixedWindow(10, time.Minute))))},
		{"SetTenantStatus", second(c.SetTenantStatus(ctx, "acme", sluice.TenantSuspended))},
		{"PutOverride", second(c.PutOverride(ctx, sluice.Override{Tenant: "acme", Rule: "api", Name: "vip", Subjects: []string{"vip-*"},
			Limits: []sluice.Limit{sluice.FixedWindow(100, time.Minute)}}))},
		{"DeleteOverride", c.DeleteOverride(ctx, "acme", "api", "vip")},
		{"RecordReset", c.RecordReset(ctx, "acme", "api", "user-1")},
		{"CheckWritable", c.CheckWritable(ctx)},
	}
	for _, ch := range changes {
		if !errors.Is(ch.err, sluice.ErrCatalogReadOnly) {
			t.Errorf("%s on a read-only catalog: %v, want ErrCatalogReadOnly", ch.name, ch.err)
		}
	}
	if ts, err := c.Tenants(ctx); err != nil || len(ts) != 1 || ts[0].Status != sluice.TenantActive {
		t.Errorf("after the refused changes: %v, %v; want acme alone, still active", ts, err)
	}
}

func second[T any](_ T, err error) error { return err }
