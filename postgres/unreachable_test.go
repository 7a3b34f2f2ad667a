package postgres_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/postgres"
)

// TestUnreachable: what a starting service waits through (nothing listens,
// a connection reset) against what it refuses at once (a database the
// server does not have, a statement that fails).
func TestUnreachable(t *testing.T) {
	dsn := testenv.Postgres(t)
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("%s must be a URL DSN: %v", testenv.PostgresEnv, err)
	}
	nowhere := *u
	nowhere.Host = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	missing := *u
	missing.Path = "/sluice_no_such_database"

	for _, tc := range []struct {
		name string
		dsn  string
		want bool
	}{
		{"nothing listens", nowhere.String(), true},
		{"no such database", missing.String(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := postgres.Open(t.Context(), tc.dsn)
			if err == nil {
				c.Close()
				t.Fatal("Open succeeded")
			}
			if got := postgres.Unreachable(err); got != tc.want {
				t.Errorf("Unreachable(%v) = %v, want %v", err, got, tc.want)
			}
		})
	}
	t.Run("a failing statement", func(t *testing.T) {
		c, err := postgres.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Version(t.Context()); err == nil || postgres.Unreachable(err) {
			// Version on an unmigrated database fails: no such table.
			t.Errorf("Version before Migrate: %v, Unreachable %v; want a failure that is not unreachability", err, postgres.Unreachable(err))
		}
	})
	if postgres.Unreachable(nil) {
		t.Error("Unreachable(nil)")
	}
}
