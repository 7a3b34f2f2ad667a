package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/memory"
)

// TestFullMemoryStoreAnswersStoreFull: a memory store whose tenant budget
// is taken refuses a new subject with its own code and message, not "the
// store is unavailable": 503 store_full on a rule that fails closed, a
// degraded allow on one that fails open; a subject it already counts is
// still decided.
func TestFullMemoryStoreAnswersStoreFull(t *testing.T) {
	store := memory.New(memory.Options{MaxKeys: 10, MaxKeysPerTenant: 1})
	t.Cleanup(func() { store.Close() })
	h := newHarness(t, harnessOptions{store: store})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	limits := []any{map[string]any{"name": "m", "algorithm": "fixed_window", "limit": 100, "window": "1h"}}
	h.putRule("acme", "closed", map[string]any{"route": "/closed", "limits": limits, "failure_mode": "closed"})
	h.putRule("acme", "open", map[string]any{"route": "/open", "limits": limits, "failure_mode": "open"})

	if r := h.check(key, map[string]any{"route": "/closed", "subject": "first"}); r.status != http.StatusOK {
		t.Fatalf("the first subject: %d %s", r.status, r.raw)
	}
	r := h.check(key, map[string]any{"route": "/closed", "subject": "second"})
	if r.status != http.StatusServiceUnavailable || r.errorCode() != "store_full" || !strings.Contains(r.raw, "no room for a new counter") || r.header.Get("Retry-After") == "" {
		t.Errorf("a new subject past the tenant's budget, rule failing closed: %d %s (Retry-After %q), want 503 store_full", r.status, r.raw, r.header.Get("Retry-After"))
	}
	if r := h.check(key, map[string]any{"route": "/open", "subject": "second"}); r.status != http.StatusOK || r.body["degraded"] != true {
		t.Errorf("the same, rule failing open: %d %s, want 200 degraded", r.status, r.raw)
	}
	if r := h.check(key, map[string]any{"route": "/closed", "subject": "first"}); r.status != http.StatusOK || r.body["degraded"] == true {
		t.Errorf("the subject already counted: %d %s, want decided by the store", r.status, r.raw)
	}
}
