package catalogfile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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

func TestApply(t *testing.T) {
	ctx := context.Background()
	var done []string
	step := func(what string, err error) catalogfile.Step {
		return catalogfile.Step{What: what, Do: func(context.Context, catalogfile.Admin, io.Writer) error {
			done = append(done, what)
			return err
		}}
	}
	for name, c := range map[string]struct {
		plan    []catalogfile.Step
		dryRun  bool
		out     string
		done    int
		wantErr string
	}{
		"nothing": {nil, false, "No changes: the catalog matches the file.\n", 0, ""},
		"dry_run": {[]catalogfile.Step{step("+ tenant a", nil), step("+ tenant b", nil)}, true, "+ tenant a\n+ tenant b\nDry run: 2 changes not applied.\n", 0, ""},
		"applied": {[]catalogfile.Step{step("+ tenant a", nil), step("+ tenant b", nil)}, false, "+ tenant a\n+ tenant b\nApplied 2 changes.\n", 2, ""},
		"stops_at_a_failure": {[]catalogfile.Step{step("+ tenant a", nil), step("+ tenant b", errors.New("route taken")), step("+ tenant c", nil)}, false,
			"+ tenant a\n", 2, "+ tenant b: explained: route taken\napplied 1 of 3 changes"},
	} {
		t.Run(name, func(t *testing.T) {
			done = nil
			var out strings.Builder
			err := catalogfile.Apply(ctx, nil, c.plan, &out, c.dryRun, func(err error) error { return fmt.Errorf("explained: %w", err) })
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantErr)) {
				t.Fatalf("error %v, want %q", err, c.wantErr)
			}
			if out.String() != c.out || len(done) != c.done {
				t.Fatalf("wrote %q after %d steps, want %q after %d", out.String(), len(done), c.out, c.done)
			}
		})
	}
}
