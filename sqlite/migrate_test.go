package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/migrations"
	"github.com/sluicelabs/sluice/sqlite"
)

// TestRuleRebuildKeepsRulesAndLimits: the step that lets a rule be stored
// without a failure mode rebuilds the rules table (SQLite cannot alter a
// CHECK); the rules and limits written before it must come through whole.
func TestRuleRebuildKeepsRulesAndLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	steps, err := migrations.For(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	// A catalog at step 1, as an older sluice left it, foreign keys on as
	// the catalog opens them.
	db, err := sql.Open("sqlite", "file:"+path+"?_foreign_keys=1")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		steps[0].SQL,
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)`,
		`INSERT INTO schema_migrations VALUES (1, 'catalog', 0)`,
		`INSERT INTO tenants VALUES ('acme', 'active', 1)`,
		`INSERT INTO rules VALUES ('acme', 'orders', '/api/orders*', 'open', 1, 5)`,
		`INSERT INTO rule_limits VALUES ('acme', 'orders', 0, 'burst', 'token_bucket', 10, 2, 0), ('acme', 'orders', 1, 'day', 'fixed_window', 500, 0, 86400000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	c, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, err := c.Rule(t.Context(), "acme", "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := []sluice.Limit{sluice.TokenBucket(10, 2).Named("burst"), sluice.FixedWindow(500, 24*time.Hour).Named("day")}
	if r.Route != "/api/orders*" || r.FailureMode != sluice.FailOpen || !r.Shadow || len(r.Limits) != 2 || r.Limits[0] != want[0] || r.Limits[1] != want[1] {
		t.Fatalf("after the rebuild: %+v, want route /api/orders*, open, shadow, limits %v", r, want)
	}
	// The rebuilt table takes a rule without a failure mode.
	if err := c.DeleteRule(t.Context(), "acme", "orders"); err != nil {
		t.Fatal(err)
	}
	r.Name, r.Route, r.FailureMode = "again", "/again", ""
	stored, err := c.PutRule(t.Context(), r)
	if err != nil || stored.FailureMode != "" {
		t.Fatalf("a rule without a failure mode after the rebuild: %+v, %v", stored, err)
	}
}
