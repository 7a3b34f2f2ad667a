package catalogtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/sqlite"
)

// SQLiteTenant opens a fresh SQLite catalog in tb's temp dir holding tenant
// "acme", one check key (its secret is returned) and the given rules: the
// smallest real catalog a test of the check API needs.
func SQLiteTenant(tb testing.TB, rules ...sluice.Rule) (*sqlite.Catalog, string) {
	tb.Helper()
	ctx := context.Background()
	catalog, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "catalog.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { catalog.Close() })
	if err := catalog.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	if _, err := catalog.CreateTenant(ctx, "acme"); err != nil {
		tb.Fatal(err)
	}
	secret, hash := sluice.NewAPIKeySecret()
	if _, err := catalog.CreateKey(ctx, "acme", "web", sluice.RoleCheck, hash); err != nil {
		tb.Fatal(err)
	}
	for _, r := range rules {
		if _, err := catalog.PutRule(ctx, r); err != nil {
			tb.Fatal(err)
		}
	}
	return catalog, secret
}
