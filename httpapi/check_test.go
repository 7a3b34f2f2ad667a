package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// slowRefill is a refill rate too slow to matter during a test: "no refill".
const slowRefill = 0.001

func TestCheck(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "payments", tokenBucketRule("/api/payments*", 2, slowRefill))

	t.Run("allowed_writes_every_field_and_the_headers", func(t *testing.T) {
		h := h.with(t)
		r := h.check(key, map[string]any{"route": "/api/payments/1", "subject": "alice"})
		if r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.raw)
		}
		for _, field := range []string{`"allowed":true`, `"rule":"payments"`, `"limit":2`, `"remaining":1`,
			`"retry_after_ms":0`, `"degraded":false`, `"shadow":false`, `"reset_after_ms":`} {
			if !strings.Contains(r.raw, field) {
				t.Errorf("body %s lacks %s", r.raw, field)
			}
		}
		limits := r.body["limits"].([]any)
		if len(limits) != 1 {
			t.Fatalf("limits = %v", limits)
		}
		l := limits[0].(map[string]any)
		for _, f := range []string{"name", "algorithm", "limit", "remaining", "reset_after_ms", "retry_after_ms"} {
			if _, ok := l[f]; !ok {
				t.Errorf("limit lacks %q: %v", f, l)
			}
		}
		for _, hdr := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if r.header.Get(hdr) == "" {
				t.Errorf("header %s missing", hdr)
			}
		}
		if r.header.Get("Retry-After") != "" {
			t.Errorf("Retry-After on an allow: %q", r.header.Get("Retry-After"))
		}
	})

	t.Run("counters_are_per_rule_not_per_path", func(t *testing.T) {
		h := h.with(t)
		// A different path under the same prefix rule shares the counter.
		r := h.check(key, map[string]any{"route": "/api/payments/2", "subject": "alice"})
		if r.status != http.StatusOK || r.body["remaining"].(float64) != 0 {
			t.Fatalf("second check: %d %s", r.status, r.raw)
		}
		r = h.check(key, map[string]any{"route": "/api/payments/3", "subject": "alice"})
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("third check: %d %s", r.status, r.raw)
		}
		if !strings.Contains(r.raw, `"remaining":0`) || !strings.Contains(r.raw, `"allowed":false`) {
			t.Errorf("deny body %s", r.raw)
		}
		if r.body["retry_after_ms"].(float64) <= 0 {
			t.Errorf("retry_after_ms = %v on a deny", r.body["retry_after_ms"])
		}
		if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After = %q on a deny", ra)
		}
	})

	t.Run("other_subjects_have_their_own_counter", func(t *testing.T) {
		h := h.with(t)
		h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/api/payments/1", "subject": "bob"})
	})

	t.Run("no_matching_rule_allows_with_rule_null", func(t *testing.T) {
		h := h.with(t)
		r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/other"})
		if !strings.Contains(r.raw, `"rule":null`) || !strings.Contains(r.raw, `"limits":[]`) || !strings.Contains(r.raw, `"limit":0`) {
			t.Errorf("body %s", r.raw)
		}
		if r.header.Get("RateLimit") != "" {
			t.Errorf("RateLimit header without a rule")
		}
	})

	t.Run("cost_zero_peeks", func(t *testing.T) {
		h := h.with(t)
		r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/api/payments", "subject": "carol", "cost": 0})
		if r.body["remaining"].(float64) != 2 {
			t.Errorf("peek consumed: %s", r.raw)
		}
	})

	t.Run("api_key_header_works_too", func(t *testing.T) {
		h := h.with(t)
		req, _ := http.NewRequest("POST", h.srv.URL+"/v1/check", strings.NewReader(`{"route":"/x"}`))
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d", resp.StatusCode)
		}
	})

	t.Run("decisions_are_counted_by_rule_and_result", func(t *testing.T) {
		h := h.with(t)
		if n := h.counter("sluice_decisions_total", map[string]string{"rule": "payments", "result": "denied"}); n < 1 {
			t.Errorf("denied decisions = %v", n)
		}
		if n := h.counter("sluice_decisions_total", map[string]string{"result": "no_rule"}); n < 1 {
			t.Errorf("no_rule decisions = %v", n)
		}
	})
}

func TestCheckRoutePrecedence(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "all", tokenBucketRule("*", 10, 1))
	h.putRule("acme", "orders", tokenBucketRule("/api/orders*", 10, 1))
	h.putRule("acme", "order-list", tokenBucketRule("/api/orders", 10, 1))
	h.putRule("acme", "api", tokenBucketRule("/api*", 10, 1))
	for route, want := range map[string]string{
		"/api/orders":    "order-list",
		"/api/orders/17": "orders",
		"/api/users":     "api",
		"/health":        "all",
	} {
		r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": route})
		if r.body["rule"] != want {
			t.Errorf("route %s matched %v, want %s", route, r.body["rule"], want)
		}
	}
}

func TestShadowRuleAllowsAndCountsDenials(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	rule := tokenBucketRule("/api*", 1, slowRefill)
	rule["shadow"] = true
	h.putRule("acme", "trial", rule)
	for i := range 3 {
		r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/api/x", "subject": "s"})
		if r.body["allowed"] != true || r.body["shadow"] != true {
			t.Fatalf("check %d: %s", i, r.raw)
		}
		if r.header.Get("Retry-After") != "" {
			t.Errorf("check %d: Retry-After on a shadow rule", i)
		}
	}
	if n := h.counter("sluice_decisions_total", map[string]string{"rule": "trial", "result": "shadow_denied"}); n != 2 {
		t.Errorf("shadow denials counted = %v, want 2", n)
	}
}

func TestDenyCacheAnswersRepeatedDenies(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "tight", fixedWindowRule("/api*", 1))
	body := map[string]any{"route": "/api", "subject": "s"}
	h.must(http.StatusOK, "POST", "/v1/check", key, body)
	h.must(http.StatusTooManyRequests, "POST", "/v1/check", key, body)
	r := h.must(http.StatusTooManyRequests, "POST", "/v1/check", key, body)
	if n := h.counter("sluice_deny_cache_hits_total", nil); n != 1 {
		t.Errorf("deny cache hits = %v, want 1", n)
	}
	if r.header.Get("Retry-After") == "" || r.body["retry_after_ms"].(float64) <= 0 {
		t.Errorf("cached deny lacks its wait: %s", r.raw)
	}

	t.Run("a_raised_limit_clears_it", func(t *testing.T) {
		h := h.with(t)
		h.putRule("acme", "tight", fixedWindowRule("/api*", 3))
		// Raising the limit keeps the counters: 1 used of 3.
		h.must(http.StatusOK, "POST", "/v1/check", key, body)
	})

	t.Run("a_subject_reset_clears_it", func(t *testing.T) {
		h := h.with(t)
		h.must(http.StatusOK, "POST", "/v1/check", key, body)
		h.must(http.StatusTooManyRequests, "POST", "/v1/check", key, body)
		h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/tight/subjects/s", testAdminToken, nil)
		h.must(http.StatusOK, "POST", "/v1/check", key, body)
	})
}

func TestCheckAuthorization(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	h.createTenant("globex")
	checkKey, checkID := h.createKey("acme", "check")
	adminKey, _ := h.createKey("acme", "admin")
	globexKey, _ := h.createKey("globex", "check")
	h.putRule("globex", "all", tokenBucketRule("*", 1, slowRefill))
	body := map[string]any{"route": "/api"}

	h.must(http.StatusOK, "POST", "/v1/check", checkKey, body)
	for _, c := range []struct {
		name, key string
		status    int
		code      string
	}{
		{"missing_key", "", http.StatusUnauthorized, "missing_api_key"},
		{"unknown_key", "sk_nope", http.StatusUnauthorized, "invalid_api_key"},
		{"admin_role_key", adminKey, http.StatusForbidden, "wrong_role"},
		{"operator_token", testAdminToken, http.StatusForbidden, "wrong_role"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.with(t).check(c.key, body)
			if r.status != c.status || r.errorCode() != c.code {
				t.Errorf("got %d %s, want %d %s", r.status, r.raw, c.status, c.code)
			}
		})
	}

	t.Run("one_tenant_never_uses_anothers_rules", func(t *testing.T) {
		h := h.with(t)
		// globex's "*" rule allows one check; acme's checks never touch it.
		for range 3 {
			r := h.must(http.StatusOK, "POST", "/v1/check", checkKey, body)
			if r.body["rule"] != nil {
				t.Fatalf("acme matched %v", r.body["rule"])
			}
		}
		h.must(http.StatusOK, "POST", "/v1/check", globexKey, body)
	})

	t.Run("suspended_tenant", func(t *testing.T) {
		h := h.with(t)
		h.must(http.StatusOK, "PATCH", "/v1/tenants/acme", testAdminToken, map[string]any{"status": "suspended"})
		r := h.check(checkKey, body)
		if r.status != http.StatusForbidden || r.errorCode() != "tenant_suspended" {
			t.Errorf("got %d %s", r.status, r.raw)
		}
		h.must(http.StatusOK, "PATCH", "/v1/tenants/acme", testAdminToken, map[string]any{"status": "active"})
		h.must(http.StatusOK, "POST", "/v1/check", checkKey, body)
	})

	t.Run("revoked_key", func(t *testing.T) {
		h := h.with(t)
		h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+checkID, testAdminToken, nil)
		r := h.check(checkKey, body)
		if r.status != http.StatusUnauthorized {
			t.Errorf("got %d %s", r.status, r.raw)
		}
	})
}

func TestKeySecretIsShownOnceAndNeverListed(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	secret, id := h.createKey("acme", "check")
	r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/keys", testAdminToken, nil)
	if strings.Contains(r.raw, secret) || strings.Contains(r.raw, "secret") || strings.Contains(r.raw, "hash") {
		t.Errorf("key list leaks: %s", r.raw)
	}
	var list struct {
		Keys []map[string]any `json:"keys"`
	}
	_ = json.Unmarshal([]byte(r.raw), &list)
	if len(list.Keys) != 1 || list.Keys[0]["id"] != id || list.Keys[0]["revoked_at"] != nil {
		t.Errorf("keys = %v", list.Keys)
	}
}

// fixedWindowRule limits to limit per hour: no refill during a test.
func fixedWindowRule(route string, limit int64) map[string]any {
	return map[string]any{
		"route":  route,
		"limits": []any{map[string]any{"name": "hourly", "algorithm": "fixed_window", "limit": limit, "window": "1h"}},
	}
}

func TestStoreOutageAppliesEachRulesFailureMode(t *testing.T) {
	redis := testenv.Redis(t)
	rs, err := sluiceredis.Open(redis.URL(), sluiceredis.Options{Prefix: "test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	h := newHarness(t, harnessOptions{store: rs, guard: guard.Options{Timeout: 50 * time.Millisecond}})
	h.api.storePing = rs.Ping
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	for _, mode := range []string{"closed", "open", "local"} {
		rule := tokenBucketRule("/"+mode, 5, 1)
		rule["failure_mode"] = mode
		h.putRule("acme", mode, rule)
	}
	// The first call to a fresh Redis dials and loads the script, which
	// under -race can outlast the 50 ms deadline and fail closed: wait for
	// the store to be warm (an outage is what is tested here, not a start).
	testenv.Eventually(t, 5*time.Second, "the first check passes", func() bool {
		return h.check(key, map[string]any{"route": "/closed"}).status == http.StatusOK
	})
	h.must(http.StatusOK, "GET", "/readyz", "", nil)

	redis.Stop()
	r := h.check(key, map[string]any{"route": "/closed"})
	if r.status != http.StatusServiceUnavailable || r.errorCode() != "store_unavailable" || r.header.Get("Retry-After") == "" {
		t.Errorf("closed: %d %v %s", r.status, r.header, r.raw)
	}
	r = h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/open"})
	if r.body["allowed"] != true || r.body["degraded"] != true {
		t.Errorf("open: %s", r.raw)
	}
	r = h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/local"})
	if r.body["degraded"] != true || r.body["limit"].(float64) != 5 {
		t.Errorf("local: %s", r.raw)
	}
	// A rule fails closed: not ready, once the answer cached from before
	// the outage (at most a second old) has expired.
	testenv.Eventually(t, 3*time.Second, "readyz turns 503 with Redis down", func() bool {
		return h.do("GET", "/readyz", "", nil).status == http.StatusServiceUnavailable
	})

	redis.Start()
	// The breaker probes and closes again once the store is back.
	testenv.Eventually(t, 5*time.Second, "checks recover after Redis restarts", func() bool {
		return h.do("POST", "/v1/check", key, map[string]any{"route": "/closed"}).status == http.StatusOK
	})
}

func TestDecisionTopLevelIsTheMostRestrictiveLimit(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "api", map[string]any{
		"route": "/api*",
		"limits": []any{
			map[string]any{"name": "burst", "algorithm": "token_bucket", "capacity": 5, "refill_per_second": slowRefill},
			map[string]any{"name": "hourly", "algorithm": "fixed_window", "limit": 2, "window": "1h"},
		},
	})
	body := map[string]any{"route": "/api/x", "subject": "s"}
	figures := func(r response) (limit, remaining, retry float64) {
		return r.body["limit"].(float64), r.body["remaining"].(float64), r.body["retry_after_ms"].(float64)
	}

	// Allowed: the limit with the least remaining (hourly: 1 of 2 left, burst 4 of 5).
	r := h.must(http.StatusOK, "POST", "/v1/check", key, body)
	if limit, remaining, retry := figures(r); limit != 2 || remaining != 1 || retry != 0 {
		t.Errorf("allowed: top level limit=%v remaining=%v retry=%v, want hourly's 2/1/0: %s", limit, remaining, retry, r.raw)
	}
	h.must(http.StatusOK, "POST", "/v1/check", key, body)

	// Denied by hourly only: its figures and its wait, with burst's own figures beside.
	r = h.must(http.StatusTooManyRequests, "POST", "/v1/check", key, body)
	limit, remaining, retry := figures(r)
	if limit != 2 || remaining != 0 || retry <= 0 || retry > float64(time.Hour.Milliseconds()) {
		t.Errorf("denied: top level limit=%v remaining=%v retry=%v, want hourly's: %s", limit, remaining, retry, r.raw)
	}
	limits := r.body["limits"].([]any)
	burst, hourly := limits[0].(map[string]any), limits[1].(map[string]any)
	if burst["name"] != "burst" || burst["remaining"] != 3.0 || burst["retry_after_ms"] != 0.0 {
		t.Errorf("burst figures %v", burst)
	}
	if hourly["name"] != "hourly" || hourly["retry_after_ms"] != retry {
		t.Errorf("hourly figures %v, top-level retry %v", hourly, retry)
	}
	if ra := r.header.Get("Retry-After"); ra != fmt.Sprint(int64(math.Ceil(retry/1000))) {
		t.Errorf("Retry-After %q for retry_after_ms %v: want the seconds rounded up", ra, retry)
	}
	if got := r.header.Get("X-RateLimit-Limit"); got != "2" {
		t.Errorf("X-RateLimit-Limit %q, want the most restrictive limit's 2", got)
	}
}
