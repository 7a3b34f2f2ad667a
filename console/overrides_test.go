package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestConsoleShowsPlansAndOverrides: the rules page names a rule's plans
// and links to a read-only page of its plans and overrides; editing the
// rule's limits in the form keeps its plans (and so its overrides, which
// may set a plan's limit).
func TestConsoleShowsPlansAndOverrides(t *testing.T) {
	s := newStack(t)
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"acme"}`)
	if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/search", adminToken, `{"route":"/v1/search*",
		"limits":[{"name":"minute","algorithm":"sliding_window","limit":100,"window":"1m"}],
		"plans":{"pro":[{"name":"minute","algorithm":"sliding_window","limit":1000,"window":"1m"},{"name":"day","algorithm":"fixed_window","limit":50000,"window":"1d"}]}}`); status != http.StatusCreated {
		t.Fatalf("put rule: %d %s", status, raw)
	}
	for _, o := range []struct{ name, body string }{
		{"launch-week", `{"subjects":"cust-17","limits":[{"name":"day","algorithm":"fixed_window","limit":500000,"window":"1d"}],"expires_at":"2099-12-09T00:00:00Z"}`},
		{"partners", `{"subjects":["partner-*"],"limits":[{"name":"minute","algorithm":"sliding_window","limit":5000,"window":"1m"}]}`},
	} {
		if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/search/overrides/"+o.name, adminToken, o.body); status != http.StatusCreated {
			t.Fatalf("put override %s: %d %s", o.name, status, raw)
		}
	}
	b := s.browser()
	b.signIn(adminToken)
	must(t, "rules", b.get("/console/tenants/acme/rules"), http.StatusOK, `<span class="plan">pro</span>`, "/rules/search/overrides")
	must(t, "plans and overrides", b.get("/console/tenants/acme/rules/search/overrides"), http.StatusOK,
		`id="plans"`, "minute: 1000 per sliding 1m", `id="overrides"`, "launch-week", "<code>cust-17</code>", "2099-12-09T00:00:00Z",
		"<code>partner-*</code>", "never")

	// Edit the rule's own limit in the form: the plans stay.
	form := url.Values{"editing": {"true"}, "name": {"search"}, "route": {"/v1/search*"}, "failure_mode": {""},
		"algorithm0": {"sliding_window"}, "limit_name0": {"minute"}, "amount0": {"200"}, "window0": {"1m"}}
	if p := b.post("/console/tenants/acme/rules", form); p.status != http.StatusSeeOther {
		t.Fatalf("edit rule: %d\n%s", p.status, p.body)
	}
	if _, raw := s.apiCall("GET", "/v1/tenants/acme/rules/search", adminToken, ""); !strings.Contains(raw, `"limit":200`) || !strings.Contains(raw, `"plans":{"pro"`) {
		t.Errorf("rule after the edit lost its plans or its change: %s", raw)
	}
}
