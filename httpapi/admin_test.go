package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func TestTenantAdminKeyManagesItsOwnTenantOnly(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	h.createTenant("globex")
	acmeAdmin, _ := h.createKey("acme", "admin")
	acmeCheck, _ := h.createKey("acme", "check")
	globexKey, globexKeyID := h.createKey("globex", "check")
	h.putRule("globex", "all", tokenBucketRule("*", 5, 1))
	rule := tokenBucketRule("/api*", 5, 1)

	t.Run("own_tenant", func(t *testing.T) {
		h := h.with(t)
		h.must(http.StatusOK, "GET", "/v1/tenants/acme", acmeAdmin, nil)
		h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", acmeAdmin, rule)
		h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules", acmeAdmin, nil)
		h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api", acmeAdmin, nil)
		r := h.must(http.StatusCreated, "POST", "/v1/tenants/acme/keys", acmeAdmin, map[string]any{"name": "ci", "role": "check"})
		h.must(http.StatusOK, "GET", "/v1/tenants/acme/keys", acmeAdmin, nil)
		h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+r.body["id"].(string), acmeAdmin, nil)
		h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/api/subjects/u", acmeAdmin, nil)
		h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/api", acmeAdmin, nil)
		list := h.must(http.StatusOK, "GET", "/v1/tenants", acmeAdmin, nil)
		if ts := list.body["tenants"].([]any); len(ts) != 1 || ts[0].(map[string]any)["name"] != "acme" {
			t.Errorf("a tenant key lists %v", ts)
		}
	})

	ctx := context.Background()
	for _, c := range []struct {
		name, method, path string
		key                string
		body               any
		status             int
		code               string
	}{
		{"read_other_tenant", "GET", "/v1/tenants/globex", acmeAdmin, nil, 403, "forbidden"},
		{"read_other_rules", "GET", "/v1/tenants/globex/rules", acmeAdmin, nil, 403, "forbidden"},
		{"read_other_rule", "GET", "/v1/tenants/globex/rules/all", acmeAdmin, nil, 403, "forbidden"},
		{"change_other_rule", "PUT", "/v1/tenants/globex/rules/all", acmeAdmin, rule, 403, "forbidden"},
		{"delete_other_rule", "DELETE", "/v1/tenants/globex/rules/all", acmeAdmin, nil, 403, "forbidden"},
		{"reset_other_subject", "DELETE", "/v1/tenants/globex/rules/all/subjects/u", acmeAdmin, nil, 403, "forbidden"},
		{"list_other_keys", "GET", "/v1/tenants/globex/keys", acmeAdmin, nil, 403, "forbidden"},
		{"create_other_key", "POST", "/v1/tenants/globex/keys", acmeAdmin, map[string]any{"role": "admin"}, 403, "forbidden"},
		{"revoke_other_key", "DELETE", "/v1/tenants/globex/keys/" + globexKeyID, acmeAdmin, nil, 403, "forbidden"},
		// Through its own tenant's path, another tenant's key is not found.
		{"revoke_other_key_through_own_path", "DELETE", "/v1/tenants/acme/keys/" + globexKeyID, acmeAdmin, nil, 404, "not_found"},
		{"create_tenant", "POST", "/v1/tenants", acmeAdmin, map[string]any{"name": "initech"}, 403, "forbidden"},
		{"suspend_own_tenant", "PATCH", "/v1/tenants/acme", acmeAdmin, map[string]any{"status": "suspended"}, 403, "forbidden"},
		{"delete_own_tenant", "DELETE", "/v1/tenants/acme", acmeAdmin, nil, 403, "forbidden"},
		{"check_key_reads_rules", "GET", "/v1/tenants/acme/rules", acmeCheck, nil, 403, "wrong_role"},
		{"check_key_changes_rules", "PUT", "/v1/tenants/acme/rules/api", acmeCheck, rule, 403, "wrong_role"},
		{"check_key_reads_other_rules", "GET", "/v1/tenants/globex/rules", acmeCheck, nil, 403, "wrong_role"},
		{"no_credentials", "GET", "/v1/tenants", "", nil, 401, "missing_credentials"},
		{"wrong_token", "GET", "/v1/tenants", "not-the-token", nil, 401, "invalid_credentials"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := h.with(t)
			before, _ := h.catalog.Version(ctx)
			r := h.do(c.method, c.path, c.key, c.body)
			if r.status != c.status || r.errorCode() != c.code {
				t.Errorf("got %d %s, want %d %s", r.status, r.raw, c.status, c.code)
			}
			if after, _ := h.catalog.Version(ctx); after != before {
				t.Errorf("catalog changed: version %d -> %d", before, after)
			}
		})
	}

	t.Run("other_tenants_key_still_works", func(t *testing.T) {
		h := h.with(t)
		h.must(http.StatusOK, "POST", "/v1/check", globexKey, map[string]any{"route": "/x"})
	})

	t.Run("suspended_tenant_admin_key_is_refused", func(t *testing.T) {
		h := h.with(t)
		h.must(http.StatusOK, "PATCH", "/v1/tenants/acme", testAdminToken, map[string]any{"status": "suspended"})
		r := h.do("GET", "/v1/tenants/acme/rules", acmeAdmin, nil)
		if r.status != http.StatusForbidden || r.errorCode() != "tenant_suspended" {
			t.Errorf("got %d %s", r.status, r.raw)
		}
	})
}

func TestAdminLifecycle(t *testing.T) {
	h := newHarness(t, harnessOptions{defaultMode: "open"})
	h.createTenant("acme")
	r := h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/mixed", testAdminToken, map[string]any{
		"route": "/api*",
		"limits": []any{
			map[string]any{"name": "burst", "algorithm": "token_bucket", "capacity": 20, "refill_per_second": 2.5},
			map[string]any{"name": "minute", "algorithm": "sliding_window", "limit": 600, "window": "1m"},
			map[string]any{"algorithm": "fixed_window", "limit": 100, "window": "1s"},
		},
	})
	want := `"limits":[{"name":"burst","algorithm":"token_bucket","capacity":20,"refill_per_second":2.5},` +
		`{"name":"minute","algorithm":"sliding_window","limit":600,"window":"1m"},` +
		`{"name":"fixed_window","algorithm":"fixed_window","limit":100,"window":"1s"}],"failure_mode":"","shadow":false`
	if !strings.Contains(r.raw, want) {
		t.Errorf("rule answer %s\nwant it to contain %s", r.raw, want)
	}
	got := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/mixed", testAdminToken, nil)
	if !strings.Contains(got.raw, want) {
		t.Errorf("read back %s", got.raw)
	}
	h.must(http.StatusOK, "GET", "/v1/tenants/acme", testAdminToken, nil)
	h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme", testAdminToken, nil)
	h.must(http.StatusNotFound, "GET", "/v1/tenants/acme", testAdminToken, nil)
	h.must(http.StatusOK, "GET", "/healthz", "", nil)
	h.must(http.StatusOK, "GET", "/readyz", "", nil)
}

// TestRuleWindowsTakeDaysAndWeeks: the API reads windows with the one
// parser the CLI and the gateway use, days and weeks included.
func TestRuleWindowsTakeDaysAndWeeks(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	r := h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/long", testAdminToken, map[string]any{
		"route": "/api*",
		"limits": []any{
			map[string]any{"name": "daily", "algorithm": "fixed_window", "limit": 5000, "window": "1d"},
			map[string]any{"name": "weekly", "algorithm": "sliding_window", "limit": 20000, "window": "1.5w"},
		},
	})
	want := `{"name":"daily","algorithm":"fixed_window","limit":5000,"window":"24h"},{"name":"weekly","algorithm":"sliding_window","limit":20000,"window":"252h"}`
	if !strings.Contains(r.raw, want) {
		t.Errorf("rule answer %s\nwant it to contain %s", r.raw, want)
	}
	bad := h.do("PUT", "/v1/tenants/acme/rules/bad", testAdminToken, map[string]any{"route": "/bad",
		"limits": []any{map[string]any{"name": "m", "algorithm": "fixed_window", "limit": 1, "window": "1y"}}})
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.raw, `window \"1y\" is not a duration like`) {
		t.Errorf("a year: %d %s", bad.status, bad.raw)
	}
}

func TestPutRuleAnswers201WhenItCreatesAnd200WhenItReplaces(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	path := "/v1/tenants/acme/rules/payments"
	r := h.must(http.StatusCreated, "PUT", path, testAdminToken, tokenBucketRule("/api/payments*", 10, 1))
	if r.body["route"] != "/api/payments*" {
		t.Errorf("created: %s", r.raw)
	}
	r = h.must(http.StatusOK, "PUT", path, testAdminToken, tokenBucketRule("/api/payments*", 20, 1))
	if limits := r.body["limits"].([]any); limits[0].(map[string]any)["capacity"] != 20.0 {
		t.Errorf("replaced: %s", r.raw)
	}
	h.must(http.StatusNoContent, "DELETE", path, testAdminToken, nil)
	h.must(http.StatusCreated, "PUT", path, testAdminToken, tokenBucketRule("/api/payments*", 10, 1))
}

// TestRecreatedTenantStartsWithFreshCounters: the store cannot enumerate a
// deleted tenant's counters, so a tenant created again under the same name
// must not inherit them (they are namespaced by the tenant's generation).
func TestRecreatedTenantStartsWithFreshCounters(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	setup := func() string {
		h.createTenant("acme")
		h.putRule("acme", "orders", fixedWindowRule("/api/orders*", 1))
		key, _ := h.createKey("acme", "check")
		return key
	}
	key := setup()
	body := map[string]any{"route": "/api/orders", "subject": "alice"}
	h.check(key, body)
	if r := h.check(key, body); r.status != http.StatusTooManyRequests {
		t.Fatalf("second check: %d, want 429", r.status)
	}
	h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme", testAdminToken, nil)
	// Created again at once, within the same millisecond as like as not:
	// the namespace comes from the catalog generation, not the clock.
	key = setup()
	if r := h.check(key, body); r.status != http.StatusOK {
		t.Fatalf("the recreated tenant inherited the deleted one's counter: %d %s", r.status, r.raw)
	}
	// A subject reset still reaches the recreated tenant's counters.
	if r := h.check(key, body); r.status != http.StatusTooManyRequests {
		t.Fatalf("second check after recreation: %d, want 429", r.status)
	}
	h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/orders/subjects/alice", testAdminToken, nil)
	if r := h.check(key, body); r.status != http.StatusOK {
		t.Fatalf("after a subject reset: %d %s", r.status, r.raw)
	}
}
