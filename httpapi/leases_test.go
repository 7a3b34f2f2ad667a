package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestLeaseOnTheWire: a limit's "lease": "auto" is stored and read back,
// and a lease on a concurrency limit or of another value is refused.
func TestLeaseOnTheWire(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	h.putRule("acme", "hot", map[string]any{"route": "/hot", "limits": []any{
		map[string]any{"name": "second", "algorithm": "fixed_window", "limit": 100, "window": "1s", "lease": "auto"},
		map[string]any{"name": "burst", "algorithm": "token_bucket", "capacity": 10, "refill_per_second": 5, "lease": "auto"},
	}})
	r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/hot", testAdminToken, nil)
	if !strings.Contains(r.raw, `"window":"1s","lease":"auto"`) || !strings.Contains(r.raw, `"refill_per_second":5,"lease":"auto"`) {
		t.Fatalf("rule: %s", r.raw)
	}
	for _, l := range []map[string]any{
		{"name": "c", "algorithm": "concurrency", "limit": 2, "ttl": "30s", "lease": "auto"},
		{"name": "w", "algorithm": "fixed_window", "limit": 2, "window": "1m", "lease": "always"},
	} {
		r := h.do("PUT", "/v1/tenants/acme/rules/bad", testAdminToken, map[string]any{"route": "/bad", "limits": []any{l}})
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, "lease") {
			t.Errorf("%v: status %d %s", l, r.status, r.raw)
		}
	}
}
