package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/sqlite"
)

// adminTokenCatalogs opens a fresh, migrated catalog of each dialect.
var adminTokenCatalogs = []struct {
	name string
	open func(t *testing.T) sluice.Catalog
}{
	{"sqlite", func(t *testing.T) sluice.Catalog {
		c, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "sluice.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c
	}},
	{"postgres", func(t *testing.T) sluice.Catalog { return newPostgresCatalog(t, testenv.Postgres(t)) }},
}

// TestGeneratedAdminTokenGoesToTheTokenFile: --admin-token-file naming a
// file that does not exist, on an empty catalog, gets the generated token,
// mode 0600, and the token appears in no log line at any level, nor on
// stderr; the next start reads it back. A catalog that already holds a token
// refuses such a start and writes no file.
func TestGeneratedAdminTokenGoesToTheTokenFile(t *testing.T) {
	for _, db := range adminTokenCatalogs {
		t.Run(db.name, func(t *testing.T) {
			ctx := sluice.WithActor(context.Background(), sluice.ActorSystem)
			c := db.open(t)
			path := filepath.Join(t.TempDir(), "admin-token")
			var out bytes.Buffer // stderr and the log, not a terminal
			log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
			given, err := AdminTokenFile(path)
			if err != nil || given.Token != "" || given.WriteTo != path {
				t.Fatalf("AdminTokenFile of a missing file: %+v, %v; want no token, written to %s", given, err, path)
			}
			origin, err := EnsureAdminToken(ctx, c, given, "http://localhost:8080", &out, log)
			if err != nil || origin != AdminTokenGenerated {
				t.Fatalf("EnsureAdminToken: %q, %v", origin, err)
			}
			info, err := os.Stat(path)
			if err != nil || info.Mode().Perm() != 0o600 {
				t.Fatalf("the token file: %v, %v; want mode 0600", info, err)
			}
			b, _ := os.ReadFile(path)
			token := strings.TrimSpace(string(b))
			if stored, err := c.AdminTokenHash(ctx); err != nil || !bytes.Equal(stored, sluice.HashAPIKey(token)) {
				t.Fatalf("the stored hash is not the file's token's (%v)", err)
			}
			if strings.Contains(out.String(), token) || !strings.Contains(out.String(), "written to --admin-token-file") {
				t.Fatalf("the token shows outside its file, or its writing is not logged:\n%s", out.String())
			}

			// The next start: the file gives the token, nothing changes.
			out.Reset()
			again, err := AdminTokenFile(path)
			if err != nil || again.Token != token {
				t.Fatalf("reading the file back: %+v, %v", again, err)
			}
			if origin, err := EnsureAdminToken(ctx, c, again, "http://localhost:8080", &out, log); err != nil || origin != "file" || strings.Contains(out.String(), "replaced") {
				t.Fatalf("a start with the written file: %q, %v\n%s", origin, err, out.String())
			}

			// A stored token, a missing file: refused, no file written.
			other := filepath.Join(t.TempDir(), "admin-token")
			missing, _ := AdminTokenFile(other)
			if _, err := EnsureAdminToken(ctx, c, missing, "http://localhost:8080", &out, log); err == nil || !strings.Contains(err.Error(), "already holds an admin token") {
				t.Fatalf("a missing file with a token stored: %v, want a refusal", err)
			}
			if _, err := os.Stat(other); !os.IsNotExist(err) {
				t.Errorf("a file was written for a token that is not in force: %v", err)
			}
			if stored, _ := c.AdminTokenHash(ctx); !bytes.Equal(stored, sluice.HashAPIKey(token)) {
				t.Error("the refused start changed the stored token")
			}
		})
	}
}

// TestGeneratedAdminTokenIsShownOnce: without a token file, the generated
// token is in exactly one record, whatever the level (debug included).
func TestGeneratedAdminTokenIsShownOnce(t *testing.T) {
	for _, db := range adminTokenCatalogs {
		t.Run(db.name, func(t *testing.T) {
			c := db.open(t)
			var out bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
			if _, err := EnsureAdminTokenInForce(sluice.WithActor(context.Background(), sluice.ActorSystem), c, GivenAdminToken{}, "http://localhost:8080", &out, log); err != nil {
				t.Fatal(err)
			}
			i := strings.Index(out.String(), sluice.AdminTokenPrefix)
			if i < 0 {
				t.Fatalf("no token shown:\n%s", out.String())
			}
			token := out.String()[i:]
			token = token[:strings.IndexAny(token, `"\n `)]
			if n := strings.Count(out.String(), token); n != 1 {
				t.Fatalf("the token appears %d times, want once:\n%s", n, out.String())
			}
		})
	}
}
