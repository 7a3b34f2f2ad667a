package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// TestCreditsOverHTTP: two instances sharing one Redis and one catalog; a
// subject spends its monthly credits, is denied with the next refill as its
// Retry-After, is topped up through one instance and admitted by both; a
// retried top-up is applied once; bad top-ups answer 400 and change nothing;
// the subject's page shows the balance and the next refill; the audit log
// records each applied or repeated top-up.
func TestCreditsOverHTTP(t *testing.T) {
	redis := testenv.Redis(t)
	dsn := testenv.Postgres(t)
	var hs []*harness
	for range 2 {
		rs, err := sluiceredis.Open(redis.URL(), sluiceredis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		hs = append(hs, newHarness(t, harnessOptions{dsn: dsn, store: rs, guard: guard.Options{Timeout: 10 * time.Second}}))
	}
	a, b := hs[0], hs[1]
	a.createTenant("acme")
	key, _ := a.createKey("acme", "check")
	a.putRule("acme", "api", map[string]any{"route": "/api*", "limits": []map[string]any{
		{"name": "burst", "algorithm": "token_bucket", "capacity": 100, "refill_per_second": 100},
		{"name": "credits", "algorithm": "credits", "refill": map[string]any{"every": "month", "amount": 3, "mode": "set"}},
	}})
	for _, h := range hs {
		testenv.Eventually(t, 10*time.Second, "rule reaches every instance", func() bool {
			return h.check(key, map[string]any{"route": "/api/x", "subject": "probe", "cost": 0}).body["rule"] == "api"
		})
	}
	checkAt := func(h *harness, cost int) response {
		return h.check(key, map[string]any{"route": "/api/x", "subject": "cust-1", "cost": cost})
	}
	if r := checkAt(a, 3); r.status != http.StatusOK {
		t.Fatalf("spending the 3 credits: %d %s", r.status, r.raw)
	}
	now := time.Now().UTC()
	nextMonth := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	for _, h := range hs {
		r := checkAt(h, 1)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("a check with no credits left: %d %s", r.status, r.raw)
		}
		retry := time.Duration(r.body["retry_after_ms"].(float64)) * time.Millisecond
		if wait := time.Until(nextMonth); retry < wait-time.Minute || retry > wait+time.Second {
			t.Fatalf("retry_after %v; want the time to the next refill, %v", retry, wait)
		}
	}

	path := "/v1/tenants/acme/rules/api/subjects/cust-1/credits"
	up := a.must(http.StatusOK, "POST", path, testAdminToken, map[string]any{"limit": "credits", "add": 5, "idempotency_key": "inv-1"})
	if up.body["balance"] != 5.0 || up.body["applied"] != true {
		t.Fatalf("top-up: %s", up.raw)
	}
	// Both instances admit at once: a top-up is not a deny cache's to hide.
	for _, h := range hs {
		if r := checkAt(h, 1); r.status != http.StatusOK {
			t.Fatalf("a check after the top-up: %d %s", r.status, r.raw)
		}
	}
	again := b.must(http.StatusOK, "POST", path, testAdminToken, map[string]any{"limit": "credits", "add": 5, "idempotency_key": "inv-1"})
	if again.body["balance"] != 3.0 || again.body["applied"] != false {
		t.Fatalf("retried top-up: %s; want balance 3, not applied", again.raw)
	}

	for body, says := range map[string]string{
		`{"limit": "credits", "add": -5, "idempotency_key": "k1"}`:           "add must be a positive number",
		`{"limit": "credits", "add": 0, "idempotency_key": "k2"}`:            "add must be a positive number",
		`{"limit": "credits", "set": -1, "idempotency_key": "k3"}`:           "set must be a balance from 0",
		`{"limit": "credits", "add": 1, "set": 1, "idempotency_key": "k4"}`:  "exactly one of",
		`{"limit": "credits", "idempotency_key": "k5"}`:                      "exactly one of",
		`{"limit": "credits", "add": 1}`:                                     "needs an idempotency_key",
		`{"limit": "burst", "add": 1, "idempotency_key": "k6"}`:              `no credits limit \"burst\" to top up in its limits, its plans or the subject's override; its credits limits are \"credits\"`,
		`{"add": 1, "idempotency_key": "k7"}`:                                `names its credits limit`,
		`{"limit": "credits", "add": 1.5, "idempotency_key": "k8"}`:          "",
		`{"limit": "credits", "add": 1, "idempotency_key": "k9", "x": true}`: "",
	} {
		r := a.do("POST", path, testAdminToken, body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, says) {
			t.Errorf("%s: %d %s; want 400 saying %q", body, r.status, r.raw, says)
		}
	}

	peek := a.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api/subjects/cust-1", testAdminToken, nil)
	var credits map[string]any
	for _, l := range peek.body["limits"].([]any) {
		if l := l.(map[string]any); l["name"] == "credits" {
			credits = l
		}
	}
	if credits["remaining"] != 3.0 || credits["algorithm"] != "credits" || credits["reset_after_ms"].(float64) <= 0 {
		t.Fatalf("the subject's credits after the bad top-ups: %v; want balance 3 (nothing changed) and the next refill", credits)
	}

	audit := a.must(http.StatusOK, "GET", "/v1/audit?tenant=acme&action=credits.top_up", testAdminToken, nil)
	entries := audit.body["entries"].([]any)
	if len(entries) != 2 {
		t.Fatalf("%d credits.top_up entries, want 2 (the top-up and its retry): %s", len(entries), audit.raw)
	}
	if e := entries[0].(map[string]any); e["target"] != "api" || !strings.Contains(audit.raw, `"subject":"cust-1"`) {
		t.Fatalf("audit entry: %v", e)
	}
}

// TestPrepaidCreditsDenyHasNoRetryAfter: a balance without a refill that
// runs out is a 429 with no Retry-After (no wait ends it; only a top-up
// does) and retry_after_ms 0, and the top-up admits the next check.
func TestPrepaidCreditsDenyHasNoRetryAfter(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "api", map[string]any{"route": "/api*", "limits": []map[string]any{
		{"name": "credits", "algorithm": "credits"},
	}})
	r := h.check(key, map[string]any{"route": "/api", "subject": "cust-1"})
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "" || r.body["retry_after_ms"] != 0.0 {
		t.Fatalf("a check with no credits: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
	h.must(http.StatusOK, "POST", "/v1/tenants/acme/rules/api/subjects/cust-1/credits", testAdminToken,
		map[string]any{"limit": "credits", "add": 1, "idempotency_key": "k"})
	if r := h.check(key, map[string]any{"route": "/api", "subject": "cust-1"}); r.status != http.StatusOK || r.body["remaining"] != 0.0 {
		t.Fatalf("after a top-up of 1: %d %s", r.status, r.raw)
	}
}
