package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCreditsAndCalendarWindowsInPlansAndOverrides: a plan may hold a
// credits limit and an override a calendar window; both are stored and read
// back whole, checks through them spend and deny as the limits say, and a
// top-up finds a credits limit that only a plan has.
func TestCreditsAndCalendarWindowsInPlansAndOverrides(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "api", map[string]any{"route": "/api*",
		"limits": []any{map[string]any{"name": "day", "algorithm": "fixed_window", "limit": 100, "window": "day"}},
		"plans": map[string]any{"prepaid": []any{
			map[string]any{"name": "day", "algorithm": "fixed_window", "limit": 100, "window": "day"},
			map[string]any{"name": "credits", "algorithm": "credits", "refill": map[string]any{"every": "month", "amount": 2, "mode": "set"}},
		}}})
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api/overrides/berlin", testAdminToken, map[string]any{
		"subjects": "berlin-*",
		"limits":   []any{map[string]any{"name": "day", "algorithm": "fixed_window", "limit": 1, "window": "day", "time_zone": "Europe/Berlin"}},
	})
	rule := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api", testAdminToken, nil)
	if !strings.Contains(rule.raw, `"refill":{"every":"month","amount":2,"mode":"set"}`) {
		t.Errorf("the plan's credits limit read back: %s", rule.raw)
	}
	over := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api/overrides/berlin", testAdminToken, nil)
	if !strings.Contains(over.raw, `"time_zone":"Europe/Berlin"`) {
		t.Errorf("the override's calendar window read back: %s", over.raw)
	}
	checkAs := func(subject, plan string) response {
		body := map[string]any{"route": "/api/x", "subject": subject}
		if plan != "" {
			body["plan"] = plan
		}
		return h.check(key, body)
	}
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if r := checkAs("cust-1", "prepaid"); r.status != want {
			t.Fatalf("prepaid check %d: %d %s, want %d", i+1, r.status, r.raw, want)
		}
	}
	up := h.must(http.StatusOK, "POST", "/v1/tenants/acme/rules/api/subjects/cust-1/credits", testAdminToken,
		map[string]any{"limit": "credits", "add": 1, "idempotency_key": "inv-1"})
	if up.body["balance"] != 1.0 {
		t.Fatalf("top-up of a plan's credits: %s", up.raw)
	}
	if r := checkAs("cust-1", "prepaid"); r.status != http.StatusOK {
		t.Errorf("after the top-up: %d %s", r.status, r.raw)
	}
	// The override's day is Berlin's: it resets at Berlin's midnight.
	if r := checkAs("berlin-7", ""); r.status != http.StatusOK || r.body["override"] != "berlin" {
		t.Fatalf("first check under the override: %d %s", r.status, r.raw)
	}
	r := checkAs("berlin-7", "")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("second check under the override: %d %s", r.status, r.raw)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(berlin)
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, berlin)
	retry := time.Duration(r.body["retry_after_ms"].(float64)) * time.Millisecond
	if wait := time.Until(midnight); retry < wait-5*time.Second || retry > wait+time.Second {
		t.Errorf("retry after %v, want the time to Berlin's midnight, %v", retry, wait)
	}
}
