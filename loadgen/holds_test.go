package loadgen_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/loadgen"
	"github.com/sluicelabs/sluice/memory"
)

// TestHTTPHoldPair drives acquire/release pairs through the real check API:
// each pair leaves the concurrency limit free, so a limit of 1 admits pair
// after pair.
func TestHTTPHoldPair(t *testing.T) {
	catalog, secret := catalogtest.SQLiteTenant(t,
		sluice.Rule{Tenant: "acme", Name: "up", Route: "/up", Limits: []sluice.Limit{sluice.Concurrency(1, time.Minute).Named("c")}, FailureMode: sluice.FailClosed},
		sluice.Rule{Tenant: "acme", Name: "plain", Route: "/plain", Limits: []sluice.Limit{sluice.FixedWindow(100, time.Hour).Named("w")}, FailureMode: sluice.FailClosed})
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	engine := check.New(store, check.Options{})
	t.Cleanup(func() { engine.Close() })
	api, err := httpapi.New(context.Background(), httpapi.Options{Catalog: catalog, Engine: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)

	ctx := context.Background()
	pair := loadgen.NewHTTPHoldPair(srv.URL, secret, "/up", 1, false, 2)
	for i := range 3 {
		if out, err := pair.Do(ctx, "s"); err != nil || out != loadgen.Allowed {
			t.Fatalf("pair %d: %v %v, want allowed (the last pair released its lease)", i, out, err)
		}
	}
	// A rule without a concurrency limit takes no hold unless reserving.
	if _, err := loadgen.NewHTTPHoldPair(srv.URL, secret, "/plain", 1, false, 2).Do(ctx, "s"); err == nil || !strings.Contains(err.Error(), "without a hold") {
		t.Fatalf("pair on a plain rule: %v, want an error saying the check took no hold", err)
	}
	if out, err := loadgen.NewHTTPHoldPair(srv.URL, secret, "/plain", 1, true, 2).Do(ctx, "s"); err != nil || out != loadgen.Allowed {
		t.Fatalf("reserving pair on a plain rule: %v %v", out, err)
	}
}
