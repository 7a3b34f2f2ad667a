package catalogfile_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/catalogfile"
	"github.com/sluicelabs/sluice/sqlite"
)

// namedKeys is an Admin holding only keys, for FindKey.
type namedKeys struct {
	catalogfile.Admin
	keys []sluice.APIKey
}

func (n namedKeys) Keys(context.Context, string) ([]sluice.APIKey, error) { return n.keys, nil }

func TestFindKey(t *testing.T) {
	revoked := time.Now()
	b := namedKeys{keys: []sluice.APIKey{
		{ID: "key_a", Name: "web"}, {ID: "key_b", Name: "web"}, {ID: "key_c", Name: "web", RevokedAt: &revoked}, {ID: "key_d", Name: "ops"},
	}}
	ctx := context.Background()
	if _, err := catalogfile.FindKey(ctx, b, "acme", "web"); err == nil || !strings.Contains(err.Error(), "2 active keys named \"web\" (key_a, key_b)") {
		t.Errorf("ambiguous name: %v", err)
	}
	if k, err := catalogfile.FindKey(ctx, b, "acme", "key_c"); err != nil || k.ID != "key_c" {
		t.Errorf("by ID, revoked or not: %+v, %v", k, err)
	}
	if k, err := catalogfile.FindKey(ctx, b, "acme", "ops"); err != nil || k.ID != "key_d" {
		t.Errorf("by name: %+v, %v", k, err)
	}
	if _, err := catalogfile.FindKey(ctx, b, "acme", "nope"); !errors.Is(err, sluice.ErrNotFound) {
		t.Errorf("no such key: %v, want sluice.ErrNotFound", err)
	}
}

func TestCatalogAdminKeys(t *testing.T) {
	ctx := context.Background()
	c, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	a := catalogfile.CatalogAdmin{Catalog: c}
	if _, err := a.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	k, secret, err := a.NewKey(ctx, "acme", "web", sluice.RoleCheck)
	if err != nil {
		t.Fatal(err)
	}
	if secret == "" || k.Name != "web" || k.Role != sluice.RoleCheck || k.Tenant != "acme" {
		t.Fatalf("created %+v with secret %q", k, secret)
	}
	if err := a.Revoke(ctx, "acme", k.ID); err != nil {
		t.Fatal(err)
	}
	if ks, err := a.Keys(ctx, "acme"); err != nil || len(ks) != 1 || ks[0].RevokedAt == nil {
		t.Fatalf("after the revoke: %+v, %v", ks, err)
	}
}
