package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/sqlite"
)

// generatedToken finds a generated token where EnsureAdminToken shows it.
var generatedToken = regexp.MustCompile(`(?:"admin_token":"|SLUICE_TOKEN=)(sat_[A-Za-z0-9_-]+)`)

func TestEnsureAdminToken(t *testing.T) {
	ctx := context.Background()
	c, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ensure := func(given GivenAdminToken) (string, string) {
		t.Helper()
		var out testenv.Buffer // not a terminal: the token goes in a log record
		origin, err := EnsureAdminToken(ctx, c, given, "http://localhost:8080", &out, slog.New(slog.NewJSONHandler(&out, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return origin, out.String()
	}

	origin, out := ensure(GivenAdminToken{})
	m := generatedToken.FindStringSubmatch(out)
	if origin != AdminTokenGenerated || m == nil || len(testenv.Records(t, out, "admin token generated; it is shown only this once (only its hash is stored)")) != 1 {
		t.Fatalf("first start: origin %q, output\n%s\nwant the generated token in one JSON record", origin, out)
	}
	if stored, _ := c.AdminTokenHash(ctx); !bytes.Equal(stored, sluice.HashAPIKey(m[1])) {
		t.Fatal("the token shown is not the one stored")
	}
	if origin, out := ensure(GivenAdminToken{}); origin != AdminTokenStored || strings.Contains(out, "sat_") {
		t.Fatalf("second start: origin %q, output %s; want the stored token, not shown", origin, out)
	}
	origin, out = ensure(GivenAdminToken{Token: "given-token-0123456789abcdef0123456789", Origin: "env", Setting: "SLUICE_ADMIN_TOKEN"})
	rs := testenv.Records(t, out, "the admin token given replaced the stored one: the previous token no longer works")
	if origin != "env" || len(rs) != 1 || rs[0]["source"] != "env" || rs[0]["setting"] != "SLUICE_ADMIN_TOKEN" || strings.Contains(out, "given-token") {
		t.Fatalf("a given token: origin %q, output\n%s\nwant one warning naming its setting, never the token", origin, out)
	}
}

// raceCatalog holds each instance's first read of the admin token hash until
// every instance has read it, so all of them find none: the race of
// instances started together on an empty catalog, made certain.
type raceCatalog struct {
	sluice.Catalog
	firstReads *sync.WaitGroup
	once       sync.Once
}

func (c *raceCatalog) AdminTokenHash(ctx context.Context) ([]byte, error) {
	first := false
	c.once.Do(func() { first = true })
	hash, err := c.Catalog.AdminTokenHash(ctx)
	if first {
		c.firstReads.Done()
		c.firstReads.Wait()
	}
	return hash, err
}

func TestInstancesStartedTogetherPrintOnlyTheStoredAdminToken(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	const instances = 3
	var firstReads sync.WaitGroup
	firstReads.Add(instances)
	outputs := make([]testenv.Buffer, instances)
	var wg sync.WaitGroup
	for i := range instances {
		c := newPostgresCatalog(t, dsn)
		wg.Go(func() {
			rc := &raceCatalog{Catalog: c, firstReads: &firstReads}
			log := slog.New(slog.NewJSONHandler(&outputs[i], nil))
			if _, err := EnsureAdminToken(ctx, rc, GivenAdminToken{}, "http://localhost:8080", &outputs[i], log); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	stored, err := newPostgresCatalog(t, dsn).AdminTokenHash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var printed []string
	for i := range outputs {
		out := outputs[i].String()
		if m := generatedToken.FindStringSubmatch(out); m != nil {
			printed = append(printed, m[1])
		} else if !strings.Contains(out, "another instance starting at the same time generated the admin token") {
			t.Errorf("instance %d printed neither a token nor why not:\n%s", i, out)
		}
	}
	if len(printed) != 1 {
		t.Fatalf("%d instances printed a token, want exactly 1: %q", len(printed), printed)
	}
	if !bytes.Equal(sluice.HashAPIKey(printed[0]), stored) {
		t.Errorf("the printed token is not the stored one: it would be refused")
	}
}
