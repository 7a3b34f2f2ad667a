package sluice_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/sqlite"
)

func TestCheckAdminTokenStrength(t *testing.T) {
	for _, c := range []struct{ token, want string }{
		{"short", "too short"},
		{"0123456789abcdef", "too short"},
		{strings.Repeat("ab", 20), "too few characters"},
		{"0123456789abcdef0123456789abcdef", ""},
	} {
		err := sluice.CheckAdminTokenStrength(c.token)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckAdminTokenStrength(%q) = %v, want %q", c.token, err, c.want)
		}
	}
}

// TestEnsureAdminToken: none given and none stored generates one, stored by
// its hash; none given afterwards keeps it; a token given replaces it, and
// giving it again changes nothing.
func TestEnsureAdminToken(t *testing.T) {
	ctx := context.Background()
	c, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	stored := func() string {
		h, err := c.AdminTokenHash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}

	res, err := sluice.EnsureAdminToken(ctx, c, "")
	if err != nil || !strings.HasPrefix(res.Generated, sluice.AdminTokenPrefix) || res.Replaced || res.Lost {
		t.Fatalf("first start: %+v, %v; want a generated token", res, err)
	}
	if stored() != string(sluice.HashAPIKey(res.Generated)) {
		t.Fatal("the generated token's hash is not the stored one")
	}
	if res, err := sluice.EnsureAdminToken(ctx, c, ""); err != nil || res != (sluice.AdminTokenResult{}) {
		t.Fatalf("second start: %+v, %v; want the stored token kept", res, err)
	}
	given := "0123456789abcdef0123456789abcdef"
	if res, err := sluice.EnsureAdminToken(ctx, c, given); err != nil || !res.Replaced {
		t.Fatalf("token given: %+v, %v; want it to replace the stored one", res, err)
	}
	if stored() != string(sluice.HashAPIKey(given)) {
		t.Fatal("the given token's hash is not the stored one")
	}
	if res, err := sluice.EnsureAdminToken(ctx, c, given); err != nil || res != (sluice.AdminTokenResult{}) {
		t.Fatalf("same token again: %+v, %v; want no change", res, err)
	}
	if _, err := sluice.EnsureAdminToken(ctx, c, "short"); err == nil {
		t.Fatal("a weak token was accepted")
	}
}
