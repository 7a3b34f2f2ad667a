package httpapi

import (
	"net/http"
	"testing"
)

func TestPeekSubject(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	h.createTenant("globex")
	h.putRule("acme", "orders", tokenBucketRule("/orders*", 3, 0.001))
	checkKey, _ := h.createKey("acme", "check")
	adminKey, _ := h.createKey("acme", "admin")
	otherAdmin, _ := h.createKey("globex", "admin")
	h.must(http.StatusOK, "POST", "/v1/check", checkKey, map[string]any{"route": "/orders/1", "subject": "u1", "cost": 2})

	decisions := func() float64 {
		return h.counter("sluice_decisions_total", map[string]string{"tenant": "acme", "rule": "orders", "result": "allowed"})
	}
	before := decisions()
	for range 2 { // a peek consumes nothing: the second sees what the first saw
		r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/orders/subjects/u1", adminKey, nil)
		limits := r.body["limits"].([]any)
		burst := limits[0].(map[string]any)
		if burst["remaining"] != float64(1) || burst["limit"] != float64(3) || r.body["rule"] != "orders" {
			t.Fatalf("peek of u1: %s, want burst limit 3 remaining 1", r.raw)
		}
	}
	if got := decisions(); got != before {
		t.Errorf("peeks were counted as decisions: %v allowed before, %v after", before, got)
	}
	fresh := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/orders/subjects/nobody", testAdminToken, nil)
	if fresh.body["remaining"] != float64(3) {
		t.Errorf("peek of an unseen subject: %s, want remaining 3", fresh.raw)
	}

	if r := h.must(http.StatusForbidden, "GET", "/v1/tenants/acme/rules/orders/subjects/u1", otherAdmin, nil); r.errorCode() != "forbidden" {
		t.Errorf("another tenant's admin key: %s", r.raw)
	}
	if r := h.must(http.StatusForbidden, "GET", "/v1/tenants/acme/rules/orders/subjects/u1", checkKey, nil); r.errorCode() != "wrong_role" {
		t.Errorf("a check key: %s", r.raw)
	}
	h.must(http.StatusNotFound, "GET", "/v1/tenants/acme/rules/nope/subjects/u1", adminKey, nil)
}

func TestAdminCallerAndCatalogVersion(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	v0 := h.api.CatalogVersion()
	h.createTenant("acme")
	if v1 := h.api.CatalogVersion(); v1 <= v0 {
		t.Errorf("catalog version %d after a change, %d before", v1, v0)
	}
	adminKey, _ := h.createKey("acme", "admin")
	checkKey, _ := h.createKey("acme", "check")
	if c, err := h.api.AdminCaller(testAdminToken); err != nil || !c.Operator {
		t.Errorf("admin token: %+v, %v; want the operator", c, err)
	}
	if c, err := h.api.AdminCaller(adminKey); err != nil || c.Operator || c.Tenant != "acme" {
		t.Errorf("admin key: %+v, %v; want tenant acme", c, err)
	}
	for name, secret := range map[string]string{"check key": checkKey, "unknown": "sk_nope", "empty": ""} {
		if c, err := h.api.AdminCaller(secret); err == nil {
			t.Errorf("%s: %+v accepted", name, c)
		}
	}
}
