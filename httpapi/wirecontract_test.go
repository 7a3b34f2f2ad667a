package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The tests here hold the sentences of DESIGN.md's "Overrides, plans and
// credits on the wire" that overrides_test.go, plancredits_test.go and
// credits_test.go leave to them.

// TestPlansOnTheWire: an unknown plan is 400 invalid_request naming the
// plans and counts nothing; "plan": "" is no plan; a plan's limits match the
// rule's by name, so a subject moving to a plan keeps its counter.
func TestPlansOnTheWire(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", testAdminToken, plansRule("/api*"))

	r := h.check(key, map[string]any{"route": "/api/x", "subject": "u", "plan": "gold"})
	msg, _ := r.body["error"].(map[string]any)["message"].(string)
	if r.status != http.StatusBadRequest || r.errorCode() != "invalid_request" || !strings.Contains(msg, "free, pro") {
		t.Errorf("unknown plan: %d %s; want 400 invalid_request naming free, pro", r.status, r.raw)
	}
	// The unknown plan counted nothing: u still has the rule's 2.
	if n := h.admitted(key, 4, map[string]any{"route": "/api/x", "subject": "u"}); n != 2 {
		t.Errorf("after an unknown plan's check, %d of 4 admitted, want the rule's 2", n)
	}

	// An empty plan is no plan: the rule's own limits, no plan answered.
	empty := map[string]any{"route": "/api/x", "subject": "e", "plan": ""}
	first := h.check(key, empty)
	if _, ok := first.body["plan"]; first.status != http.StatusOK || ok || first.header.Get("X-RateLimit-Plan") != "" {
		t.Errorf(`"plan": "": %d %s (X-RateLimit-Plan %q); want the rule's limits and no plan`, first.status, first.raw, first.header.Get("X-RateLimit-Plan"))
	}
	if n := 1 + h.admitted(key, 4, empty); n != 2 {
		t.Errorf(`"plan": "": %d of 5 admitted, want the rule's 2`, n)
	}

	// The rule's "minute" and pro's "minute" are one counter: m spent 2
	// under the rule and gets 3 more under pro's 5.
	if n := h.admitted(key, 3, map[string]any{"route": "/api/x", "subject": "m"}); n != 2 {
		t.Fatalf("under the rule: %d of 3 admitted, want 2", n)
	}
	if n := h.admitted(key, 6, map[string]any{"route": "/api/x", "subject": "m", "plan": "pro"}); n != 3 {
		t.Errorf("then under pro: %d of 6 admitted, want 3 (5 less the rule's 2 already counted)", n)
	}
}

// TestOverridesOnTheWire: "expires_at": null is an override that never
// expires; "vip-*" matches "vip-" itself; a refill on a limit that is not
// credits is a 400 in a rule and in an override, changing nothing.
func TestOverridesOnTheWire(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", testAdminToken, plansRule("/api*"))
	base := "/v1/tenants/acme/rules/api/overrides/"

	r := h.must(http.StatusCreated, "PUT", base+"vips", testAdminToken,
		map[string]any{"subjects": "vip-*", "limits": minuteLimit(6), "expires_at": nil})
	if v, ok := r.body["expires_at"]; !ok || v != nil {
		t.Errorf(`"expires_at": null stored as %v, want null (never)`, r.body["expires_at"])
	}
	for _, subject := range []string{"vip-", "vip-1"} {
		c := h.check(key, map[string]any{"route": "/api/x", "subject": subject})
		if c.body["override"] != "vips" {
			t.Errorf("subject %q: override %v, want vips", subject, c.body["override"])
		}
	}
	if c := h.check(key, map[string]any{"route": "/api/x", "subject": "vip"}); c.body["override"] != nil {
		t.Errorf(`subject "vip" matched %v; "vip-*" needs the dash`, c.body["override"])
	}

	ctx := context.Background()
	withRefill := []any{map[string]any{"name": "minute", "algorithm": "fixed_window", "limit": 3, "window": "1m",
		"refill": map[string]any{"every": "day", "amount": 5, "mode": "set"}}}
	for _, c := range []struct {
		name, path string
		body       map[string]any
	}{
		{"rule", "/v1/tenants/acme/rules/api", map[string]any{"route": "/api*", "limits": withRefill}},
		{"override", base + "refilled", map[string]any{"subjects": "bob", "limits": withRefill}},
	} {
		before, _ := h.catalog.Version(ctx)
		r := h.do("PUT", c.path, testAdminToken, c.body)
		if r.status != http.StatusBadRequest || r.errorCode() != "invalid_request" || !strings.Contains(r.raw, "refill") {
			t.Errorf("%s with a refill on a fixed_window limit: %d %s; want 400 invalid_request about the refill", c.name, r.status, r.raw)
		}
		if after, _ := h.catalog.Version(ctx); after != before {
			t.Errorf("%s with a bad refill changed the catalog", c.name)
		}
	}
}

// subjectLimits is the subject page's limits by name.
func (h *harness) subjectLimits(rule, subject string) map[string]map[string]any {
	h.t.Helper()
	peek := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/"+rule+"/subjects/"+subject, testAdminToken, nil)
	out := map[string]map[string]any{}
	for _, l := range peek.body["limits"].([]any) {
		l := l.(map[string]any)
		out[l["name"].(string)] = l
	}
	return out
}

// TestCreditsOnTheWire: a balance starts at refill.amount (0 without a
// refill); a cost above it is a 429 that consumes nothing in the rule's
// other limits, and a rate-limit deny spends no credits; a "set" top-up answers the balance once and a repeated key
// changes nothing; a daily refill is at midnight UTC.
func TestCreditsOnTheWire(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	hourly := map[string]any{"name": "hourly", "algorithm": "fixed_window", "limit": 10, "window": "1h"}
	h.putRule("acme", "monthly", map[string]any{"route": "/monthly*", "limits": []any{hourly,
		map[string]any{"name": "credits", "algorithm": "credits", "refill": map[string]any{"every": "month", "amount": 3, "mode": "set"}}}})
	h.putRule("acme", "prepaid", map[string]any{"route": "/prepaid*", "limits": []any{hourly,
		map[string]any{"name": "credits", "algorithm": "credits"}}})

	for rule, want := range map[string]float64{"monthly": 3, "prepaid": 0} {
		if got := h.subjectLimits(rule, "fresh")["credits"]["remaining"]; got != want {
			t.Errorf("%s: a new subject's balance %v, want %v", rule, got, want)
		}
		route := "/" + rule
		r := h.check(key, map[string]any{"route": route, "subject": "s", "cost": 4})
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("%s: a cost of 4 over a balance of %v: %d %s", rule, want, r.status, r.raw)
		}
		if rule == "prepaid" && r.header.Get("Retry-After") != "" {
			t.Errorf("prepaid: a deny no wait ends says Retry-After %q", r.header.Get("Retry-After"))
		}
		if rule == "monthly" && r.header.Get("Retry-After") == "" {
			t.Errorf("monthly: the deny says no Retry-After; want the next refill")
		}
		ls := h.subjectLimits(rule, "s")
		if ls["hourly"]["remaining"] != 10.0 || ls["credits"]["remaining"] != want {
			t.Errorf("%s after the credits deny: hourly %v, credits %v; want 10 and %v (nothing consumed)",
				rule, ls["hourly"]["remaining"], ls["credits"]["remaining"], want)
		}
	}

	// The other way round: a rate-limit deny spends no credits.
	h.putRule("acme", "tight", map[string]any{"route": "/tight*", "limits": []any{
		map[string]any{"name": "hourly", "algorithm": "fixed_window", "limit": 1, "window": "1h"},
		map[string]any{"name": "credits", "algorithm": "credits", "refill": map[string]any{"every": "month", "amount": 5, "mode": "set"}}}})
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if r := h.check(key, map[string]any{"route": "/tight", "subject": "s"}); r.status != want {
			t.Fatalf("tight check %d: %d %s, want %d", i+1, r.status, r.raw, want)
		}
	}
	if got := h.subjectLimits("tight", "s")["credits"]["remaining"]; got != 4.0 {
		t.Errorf("credits after an hourly deny: %v, want 4 (only the admitted check spent)", got)
	}

	path := "/v1/tenants/acme/rules/prepaid/subjects/s/credits"
	up := h.must(http.StatusOK, "POST", path, testAdminToken, map[string]any{"limit": "credits", "set": 7, "idempotency_key": "inv-7"})
	if up.body["balance"] != 7.0 || up.body["applied"] != true {
		t.Fatalf("a set top-up: %s; want balance 7, applied", up.raw)
	}
	if r := h.check(key, map[string]any{"route": "/prepaid", "subject": "s", "cost": 2}); r.status != http.StatusOK {
		t.Fatalf("a check after the top-up: %d %s", r.status, r.raw)
	}
	again := h.must(http.StatusOK, "POST", path, testAdminToken, map[string]any{"limit": "credits", "set": 7, "idempotency_key": "inv-7"})
	if again.body["balance"] != 5.0 || again.body["applied"] != false {
		t.Fatalf("a repeated set top-up: %s; want balance 5 (unchanged), not applied", again.raw)
	}

	// A daily refill is at midnight UTC.
	h.putRule("acme", "daily", map[string]any{"route": "/daily*", "limits": []any{
		map[string]any{"name": "credits", "algorithm": "credits", "refill": map[string]any{"every": "day", "amount": 1, "mode": "set"}}}})
	h.check(key, map[string]any{"route": "/daily", "subject": "s"})
	r := h.check(key, map[string]any{"route": "/daily", "subject": "s"})
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("a second check of a daily 1: %d %s", r.status, r.raw)
	}
	if retry := time.Duration(r.body["retry_after_ms"].(float64)) * time.Millisecond; retry < time.Until(midnight)-5*time.Second || retry > time.Until(midnight)+time.Second {
		t.Errorf("a daily refill's deny: retry after %v, want the time to midnight UTC, %v", retry, time.Until(midnight))
	}
}

// TestCreditsRefillModes: "set" restores the balance to the amount at each
// period start (a top-up does not carry over); "add" adds the amount, with
// no cap unless "max" is given.
func TestCreditsRefillModes(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	for name, refill := range map[string]map[string]any{
		"set":     {"every": "1s", "amount": 3, "mode": "set"},
		"add":     {"every": "1s", "amount": 2, "mode": "add"},
		"add-max": {"every": "1s", "amount": 2, "mode": "add", "max": 3},
	} {
		h.putRule("acme", name, map[string]any{"route": "/" + name, "limits": []any{
			map[string]any{"name": "credits", "algorithm": "credits", "refill": refill}}})
	}
	spend := func(rule string, cost int) int {
		return h.check(key, map[string]any{"route": "/" + rule, "subject": "s", "cost": cost}).status
	}
	for rule, cost := range map[string]int{"set": 3, "add": 2, "add-max": 2} {
		if s := spend(rule, cost); s != http.StatusOK {
			t.Fatalf("%s: spending the starting %d: %d", rule, cost, s)
		}
	}
	h.must(http.StatusOK, "POST", "/v1/tenants/acme/rules/set/subjects/s/credits", testAdminToken,
		map[string]any{"limit": "credits", "add": 5, "idempotency_key": "k"})
	time.Sleep(2100 * time.Millisecond) // two refills or more
	for _, c := range []struct {
		rule       string
		cost, want int
	}{
		{"set", 4, http.StatusTooManyRequests}, // restored to 3: the top-up of 5 did not carry over
		{"set", 3, http.StatusOK},
		{"add", 4, http.StatusOK},                  // 2 a refill, uncapped
		{"add-max", 4, http.StatusTooManyRequests}, // capped at 3
		{"add-max", 3, http.StatusOK},
	} {
		if s := spend(c.rule, c.cost); s != c.want {
			t.Errorf("%s: a cost of %d after two refills: %d, want %d", c.rule, c.cost, s, c.want)
		}
	}
}
