package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/usage"
)

// TestUsageHistory: checks counted by the engine, rolled and flushed to the
// catalog, read back through GET /v1/tenants/{t}/usage at every step, as
// JSON and CSV; a tenant's admin key reads its own tenant only; bad
// queries are refused with what is wrong.
func TestUsageHistory(t *testing.T) {
	rec := usage.NewRecorder(usage.Options{})
	h := newHarness(t, harnessOptions{usage: rec})
	for _, tenant := range []string{"acme", "beta"} {
		h.createTenant(tenant)
		h.putRule(tenant, "api", map[string]any{"route": "/api*", "limits": []any{
			map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 3, "window": "1h"}}})
	}
	acmeKey, _ := h.createKey("acme", "check")
	betaKey, _ := h.createKey("beta", "check")
	betaAdmin, _ := h.createKey("beta", "admin")
	for range 5 {
		h.check(acmeKey, map[string]any{"route": "/api/x", "subject": "u", "cost": 1})
	}
	h.check(betaKey, map[string]any{"route": "/api/x", "subject": "u", "cost": 1})
	now := time.Now()
	rec.Roll(now)
	if err := rec.Flush(t.Context(), h.catalog.(usage.Writer)); err != nil {
		t.Fatal(err)
	}
	minute := now.UTC().Truncate(time.Minute)
	for step, start := range map[string]time.Time{
		"minute": minute, "hour": minute.Truncate(time.Hour), "day": minute.Truncate(24 * time.Hour),
	} {
		r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/usage?step="+step, testAdminToken, nil)
		want := `"rows":[{"rule":"api","start":"` + start.Format(time.RFC3339) + `","allowed":3,"denied":2,"shadow_denied":0,"degraded":0,"shed":0,"units":3}]`
		if !strings.Contains(r.raw, want) || !strings.Contains(r.raw, `"tenant":"acme","rule":null,"step":"`+step+`"`) {
			t.Errorf("step %s: %s\nwant %s", step, r.raw, want)
		}
	}
	r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/usage?rule=api&format=csv", testAdminToken, nil)
	wantCSV := "start,rule,allowed,denied,shadow_denied,degraded,shed,units\n" + minute.Format(time.RFC3339) + ",api,3,2,0,0,0,3\n"
	if r.raw != wantCSV || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") {
		t.Errorf("CSV: %q (%s)\nwant %q", r.raw, r.header.Get("Content-Type"), wantCSV)
	}
	// A rule with no history, and a range before any: no rows.
	if r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/usage?rule=other", testAdminToken, nil); !strings.Contains(r.raw, `"rows":[]`) {
		t.Errorf("another rule: %s", r.raw)
	}
	// Tenant isolation: beta's admin key reads beta's checks, never acme's.
	if r := h.must(http.StatusOK, "GET", "/v1/tenants/beta/usage", betaAdmin, nil); !strings.Contains(r.raw, `"allowed":1,"denied":0`) {
		t.Errorf("beta's own usage: %s", r.raw)
	}
	if r := h.do("GET", "/v1/tenants/acme/usage", betaAdmin, nil); r.status != http.StatusForbidden {
		t.Errorf("beta's key reading acme's usage: %d %s", r.status, r.raw)
	}
	if r := h.do("GET", "/v1/tenants/acme/usage", betaKey, nil); r.status != http.StatusForbidden {
		t.Errorf("a check key reading usage: %d %s", r.status, r.raw)
	}
	if r := h.do("GET", "/v1/tenants/nobody/usage", testAdminToken, nil); r.status != http.StatusNotFound {
		t.Errorf("an unknown tenant: %d %s", r.status, r.raw)
	}
	for query, says := range map[string]string{
		"step=week":             `step=\"week\" is not one of minute, hour or day`,
		"from=yesterday":        `from=\"yesterday\" is not a time`,
		"tenant=beta":           `Unknown query parameter \"tenant\"`,
		"step=minute&step=hour": `given 2 times`,
		"format=xml":            `format=\"xml\" is not json or csv`,
		"rule=Bad%20Name":       `rule=\"Bad Name\"`,
		"from=2026-12-02T10:00:00Z&to=2026-12-01T10:00:00Z": "must be before",
		"from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z": "more than the 10080 one query may span",
	} {
		r := h.do("GET", "/v1/tenants/acme/usage?"+query, testAdminToken, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, says) {
			t.Errorf("%s: %d %s; want 400 saying %s", query, r.status, r.raw, says)
		}
	}
	// A tenant deleted and created again starts with no history.
	h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme", testAdminToken, nil)
	h.createTenant("acme")
	if r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/usage?step=day", testAdminToken, nil); !strings.Contains(r.raw, `"rows":[]`) {
		t.Errorf("the tenant made again: %s", r.raw)
	}
}

// TestTopSubjectsAPI: the heaviest subjects counted by the engine, read
// through GET /v1/tenants/{t}/usage/top by denials and by units, as JSON
// and CSV, within the tenant only; bad queries are refused.
func TestTopSubjectsAPI(t *testing.T) {
	rec := usage.NewRecorder(usage.Options{})
	h := newHarness(t, harnessOptions{usage: rec})
	for _, tenant := range []string{"acme", "beta"} {
		h.createTenant(tenant)
		h.putRule(tenant, "api", map[string]any{"route": "/api*", "limits": []any{
			map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 10, "window": "1h"}}})
	}
	acmeKey, _ := h.createKey("acme", "check")
	betaKey, _ := h.createKey("beta", "check")
	betaAdmin, _ := h.createKey("beta", "admin")
	for subject, checks := range map[string]int{"mallory": 14, "bob": 3, "carol": 1} {
		for range checks {
			h.check(acmeKey, map[string]any{"route": "/api/x", "subject": subject, "cost": 2})
		}
	}
	h.check(betaKey, map[string]any{"route": "/api/x", "subject": "beta-user", "cost": 1})
	rec.Roll(time.Now())
	if err := rec.Flush(t.Context(), h.catalog.(usage.Writer)); err != nil {
		t.Fatal(err)
	}
	// mallory: 5 allowed (10 units), 9 denied; bob 3 allowed, 6 units.
	r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/usage/top", testAdminToken, nil)
	if !strings.Contains(r.raw, `"by":"denied"`) || !strings.Contains(r.raw, `"subjects":[{"rule":"api","subject":"mallory","denied":9,"units":10}]`) {
		t.Errorf("by denials: %s", r.raw)
	}
	r = h.must(http.StatusOK, "GET", "/v1/tenants/acme/usage/top?by=units&rule=api&limit=2&format=csv", testAdminToken, nil)
	if want := "rule,subject,denied,units\napi,mallory,9,10\napi,bob,0,6\n"; r.raw != want {
		t.Errorf("by units as CSV: %q, want %q", r.raw, want)
	}
	if r := h.must(http.StatusOK, "GET", "/v1/tenants/beta/usage/top?by=units", betaAdmin, nil); strings.Contains(r.raw, "mallory") || !strings.Contains(r.raw, `"beta-user"`) {
		t.Errorf("beta's own: %s", r.raw)
	}
	if r := h.do("GET", "/v1/tenants/acme/usage/top", betaAdmin, nil); r.status != http.StatusForbidden {
		t.Errorf("beta's key reading acme's subjects: %d %s", r.status, r.raw)
	}
	for query, says := range map[string]string{
		"by=errors":  `by=\"errors\" is not denied or units`,
		"limit=0":    `limit=\"0\" must be a whole number between 1 and 100`,
		"limit=many": `limit=\"many\" must be a whole number`,
		"step=hour":  `Unknown query parameter \"step\"`,
	} {
		r := h.do("GET", "/v1/tenants/acme/usage/top?"+query, testAdminToken, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, says) {
			t.Errorf("%s: %d %s; want 400 saying %s", query, r.status, r.raw, says)
		}
	}
}
