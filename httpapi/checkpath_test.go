package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/memory"
)

// countingStore passes every call to a real store and counts the checks
// that reach it.
type countingStore struct {
	sluice.Store
	checks atomic.Int64
}

func (c *countingStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	c.checks.Add(1)
	return c.Store.Check(ctx, req)
}

// TestCheckPathNeverTouchesTheDatabase closes the catalog once the API has
// its snapshot: every check must still be answered, from memory. It also
// counts store calls: none for a route no rule matches, none for a deny the
// deny cache answers.
func TestCheckPathNeverTouchesTheDatabase(t *testing.T) {
	ctx := context.Background()
	catalog, secret := catalogtest.SQLiteTenant(t, sluice.Rule{Tenant: "acme", Name: "payments", Route: "/api/payments*",
		Limits: []sluice.Limit{sluice.FixedWindow(1, time.Hour)}})
	store := memory.New(memory.Options{})
	defer store.Close()
	checker := &countingStore{Store: store}
	engine := check.New(checker, check.Options{})
	defer engine.Close()
	api, err := New(ctx, Options{Catalog: catalog, Engine: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// From here on any database call fails.
	if err := catalog.Close(); err != nil {
		t.Fatal(err)
	}
	bindOpenAPI(t, api)
	handler := api.Handler()
	check := func(route string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"route": "`+route+`", "subject": "user-42"}`))
		req.Header.Set("X-API-Key", secret)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}

	for _, c := range []struct {
		name       string
		route      string
		status     int
		body       string
		storeCalls int64
	}{
		{"no_rule_no_store_call", "/api/orders/1", http.StatusOK, `"rule":null`, 0},
		{"allowed", "/api/payments/1", http.StatusOK, `"allowed":true`, 1},
		{"denied_by_the_store", "/api/payments/2", http.StatusTooManyRequests, `"allowed":false`, 2},
		{"denied_by_the_deny_cache", "/api/payments/3", http.StatusTooManyRequests, `"allowed":false`, 2},
		{"still_no_store_call_without_a_rule", "/other", http.StatusOK, `"rule":null`, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := check(c.route)
			if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.body) {
				t.Errorf("got %d %s, want %d with %s", rec.Code, rec.Body, c.status, c.body)
			}
			if n := checker.checks.Load(); n != c.storeCalls {
				t.Errorf("store checks so far = %d, want %d", n, c.storeCalls)
			}
		})
	}
	if n := store.Len(); n != 1 {
		t.Errorf("store holds %d counters, want 1 (the rule's, for one subject)", n)
	}

	t.Run("readyz_is_ready_and_says_the_catalog_is_stale", func(t *testing.T) {
		// Checks are still answered, so the instance is ready; that changes
		// would go unseen is reported beside it, for monitoring.
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"catalog":"stale"`) ||
			!strings.Contains(rec.Body.String(), `"snapshot_age_seconds":`) {
			t.Errorf("readyz with the catalog closed: %d %v %s", rec.Code, rec.Header(), rec.Body)
		}
	})
}
