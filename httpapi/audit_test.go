package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// auditActions returns "actor tenant action target" of a page's entries.
func auditActions(t *testing.T, r response) []string {
	t.Helper()
	var out []string
	for _, e := range r.body["entries"].([]any) {
		m := e.(map[string]any)
		tenant, _ := m["tenant"].(string)
		out = append(out, fmt.Sprintf("%s %s %s %s", m["actor"], tenant, m["action"], m["target"]))
	}
	return out
}

// GET /v1/audit: the operator reads every change with who made it; a tenant
// admin key reads its own tenant's only; secrets never appear.
func TestAuditRecordsWhoChangedWhat(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	h.createTenant("beta")
	adminKey, adminID := h.createKey("acme", "admin")
	checkKey, checkID := h.createKey("acme", "check")
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/orders", adminKey, fixedWindowRule("/api/orders*", 5))
	h.must(http.StatusOK, "PUT", "/v1/tenants/acme/rules/orders", adminKey, fixedWindowRule("/api/orders*", 10))
	h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+checkID, adminKey, nil)
	h.putRule("beta", "b", fixedWindowRule("/b", 1))

	all := h.must(http.StatusOK, "GET", "/v1/audit", testAdminToken, nil)
	want := []string{
		"operator beta rule.create b",
		adminID + " acme key.revoke " + checkID,
		adminID + " acme rule.replace orders",
		adminID + " acme rule.create orders",
		"operator acme key.create " + checkID,
		"operator acme key.create " + adminID,
		"operator beta tenant.create beta",
		"operator acme tenant.create acme",
		"system  admin_token.set admin_token",
	}
	if got := auditActions(t, all); !slices.Equal(got, want) {
		t.Fatalf("operator's audit:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if all.body["next_before"] != nil {
		t.Errorf("a short page has next_before %v", all.body["next_before"])
	}
	if strings.Contains(all.raw, checkKey) || strings.Contains(all.raw, adminKey) || strings.Contains(all.raw, "hash") {
		t.Errorf("the audit log holds a secret: %s", all.raw)
	}
	replace := all.body["entries"].([]any)[2].(map[string]any)
	before, after := replace["before"].(map[string]any), replace["after"].(map[string]any)
	if limit := func(doc map[string]any) any { return doc["limits"].([]any)[0].(map[string]any)["limit"] }; limit(before) != 5.0 || limit(after) != 10.0 {
		t.Errorf("rule.replace before %v, after %v", before, after)
	}

	own := h.must(http.StatusOK, "GET", "/v1/audit", adminKey, nil)
	for _, line := range auditActions(t, own) {
		if !strings.Contains(line, " acme ") {
			t.Errorf("a tenant admin key reads another tenant's entry: %s", line)
		}
	}
	if n := len(auditActions(t, own)); n != 6 {
		t.Errorf("acme's admin reads %d entries; want its tenant's 6", n)
	}
	if r := h.do("GET", "/v1/audit?tenant=beta", adminKey, nil); r.status != http.StatusForbidden {
		t.Errorf("tenant admin asking for another tenant: %d %s", r.status, r.raw)
	}
	if r := h.do("GET", "/v1/audit", checkKey, nil); r.status != http.StatusUnauthorized {
		t.Errorf("a revoked key: %d %s", r.status, r.raw)
	}
	if r := h.do("GET", "/v1/audit", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("no credentials: %d %s", r.status, r.raw)
	}
}

func TestAuditFiltersAndPages(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	for i := range 5 {
		h.putRule("acme", fmt.Sprintf("r%d", i), fixedWindowRule(fmt.Sprintf("/r%d", i), 1))
	}
	get := func(query string) response {
		t.Helper()
		return h.must(http.StatusOK, "GET", "/v1/audit?"+query, testAdminToken, nil)
	}
	if got := auditActions(t, get("action=rule.create&limit=2")); !slices.Equal(got, []string{"operator acme rule.create r4", "operator acme rule.create r3"}) {
		t.Errorf("action and limit: %q", got)
	}
	var paged []string
	query := "tenant=acme&limit=2"
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		r := get(query)
		paged = append(paged, auditActions(t, r)...)
		next, ok := r.body["next_before"].(float64)
		if !ok {
			break
		}
		query = fmt.Sprintf("tenant=acme&limit=2&before=%d", int64(next))
	}
	if want := auditActions(t, get("tenant=acme")); !slices.Equal(paged, want) || len(want) != 6 {
		t.Errorf("paged %q; want %q (6 entries)", paged, want)
	}
	hourAgo := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	if n := len(auditActions(t, get("since="+hourAgo))); n != 7 {
		t.Errorf("since an hour ago: %d entries; want 7", n)
	}
	if n := len(auditActions(t, get("until="+hourAgo))); n != 0 {
		t.Errorf("until an hour ago: %d entries", n)
	}
	if n := len(auditActions(t, get("actor=system"))); n != 1 {
		t.Errorf("actor=system: %d entries; want the admin token's", n)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "before=-1", "since=yesterday", "tenant=Not%20A%20Slug", "colour=red", "limit=1&limit=2",
		"since=2026-12-01T10:00:00Z&until=2026-12-01T09:00:00Z"} {
		r := h.do("GET", "/v1/audit?"+bad, testAdminToken, nil)
		if r.status != http.StatusBadRequest || r.errorCode() != "invalid_request" {
			t.Errorf("%s: %d %s; want 400 invalid_request", bad, r.status, r.raw)
		}
	}
}
