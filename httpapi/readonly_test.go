package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestReadOnlyCatalogAnswers503: on a catalog database that cannot write
// (a read-only SQLite file, a PostgreSQL in read-only mode), a change
// answers 503 catalog_unavailable saying so, not 500 internal, and changes
// nothing; reads and checks go on; /readyz stays ready and reports the
// catalog read-only, found by its write probe, logged once. A writable
// catalog's /readyz says its writes are ok.
func TestReadOnlyCatalogAnswers503(t *testing.T) {
	seed := func(c catalogtest.Catalog) {
		ctx := sluice.WithActor(context.Background(), sluice.ActorOperator)
		if err := c.SetAdminTokenHash(ctx, sluice.HashAPIKey(testAdminToken)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CreateTenant(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PutRule(ctx, sluice.Rule{Tenant: "acme", Name: "api", Route: "*", Limits: []sluice.Limit{sluice.FixedWindow(5, time.Minute)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, db := range []struct {
		name string
		open func(t *testing.T) sluice.Catalog
	}{
		{"sqlite", func(t *testing.T) sluice.Catalog { return catalogtest.ReadOnlySQLite(t, seed) }},
		{"postgres", func(t *testing.T) sluice.Catalog { return catalogtest.ReadOnlyPostgres(t, testenv.Postgres(t), seed) }},
	} {
		t.Run(db.name, func(t *testing.T) {
			var logs testenv.Buffer
			h := newHarness(t, harnessOptions{catalog: db.open(t), logs: &logs, writeProbe: 20 * time.Millisecond})
			testenv.Eventually(t, 10*time.Second, "/readyz reports the catalog read-only", func() bool {
				r := h.do("GET", "/readyz", "", nil)
				return r.status == http.StatusOK && r.body["catalog_writes"] == "read_only"
			})
			for _, call := range []struct {
				method, path string
				body         any
			}{
				{"POST", "/v1/tenants", map[string]any{"name": "other"}},
				{"PATCH", "/v1/tenants/acme", map[string]any{"status": "suspended"}},
				{"PUT", "/v1/tenants/acme/rules/web", map[string]any{"route": "/web", "limits": []any{map[string]any{"name": "m", "algorithm": "fixed_window", "limit": 1, "window": "1m"}}}},
				{"DELETE", "/v1/tenants/acme/rules/api/subjects/user-1", nil},
			} {
				r := h.do(call.method, call.path, testAdminToken, call.body)
				if r.status != http.StatusServiceUnavailable || r.errorCode() != "catalog_unavailable" || !strings.Contains(r.raw, "read-only") || r.header.Get("Retry-After") == "" {
					t.Errorf("%s %s on a read-only catalog: %d %s (Retry-After %q), want 503 catalog_unavailable saying read-only", call.method, call.path, r.status, r.raw, r.header.Get("Retry-After"))
				}
			}
			if r := h.must(http.StatusOK, "GET", "/v1/tenants", testAdminToken, nil); !strings.Contains(r.raw, `"acme"`) || strings.Contains(r.raw, `"other"`) || strings.Contains(r.raw, "suspended") {
				t.Errorf("tenants after the refused changes: %s, want acme alone, active", r.raw)
			}
			if n := strings.Count(logs.String(), `"msg":"the catalog database is read-only:`); n != 1 {
				t.Errorf("the read-only catalog is logged %d times, want once:\n%s", n, logs.String())
			}
		})
	}
	t.Run("writable", func(t *testing.T) {
		h := newHarness(t, harnessOptions{writeProbe: 20 * time.Millisecond})
		testenv.Eventually(t, 10*time.Second, "/readyz reports the catalog's writes ok", func() bool {
			return h.do("GET", "/readyz", "", nil).body["catalog_writes"] == "ok"
		})
	})
}
