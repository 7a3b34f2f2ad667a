package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/memory"
)

// TestBadInputChangesNothing sends every kind of bad input and checks the
// status, the error code, that the message is a sentence, and that neither
// the catalog nor any counter changed.
func TestBadInputChangesNothing(t *testing.T) {
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	h := newHarness(t, harnessOptions{store: store})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.must(http.StatusCreated, "POST", "/v1/tenants/acme/keys", testAdminToken, map[string]any{"name": "web", "role": "check"})
	h.putRule("acme", "payments", tokenBucketRule("/api/payments*", 10, 1))
	h.putRule("acme", "orders", tokenBucketRule("/api/orders*", 10, 1))

	tb := func(extra string) string {
		return `{"route": "/api/x*", "limits": [{"name": "burst", "algorithm": "token_bucket"` + extra + `}]}`
	}
	win := func(extra string) string {
		return `{"route": "/api/x*", "limits": [{"name": "minute", "algorithm": "sliding_window"` + extra + `}]}`
	}
	long := "/" + strings.Repeat("a", 10<<10)
	huge := `{"route": "/api/payments", "subject": "` + strings.Repeat("s", 70<<10) + `"}`

	cases := []struct {
		name         string
		method, path string
		auth         string // "" = operator token; "key" = the check key
		body         string
		status       int
		code         string
	}{
		// POST /v1/check
		{"check_malformed_json", "POST", "/v1/check", "key", `{"route": "/api/payments"`, 400, "malformed_json"},
		{"check_not_json", "POST", "/v1/check", "key", `route=/api`, 400, "malformed_json"},
		{"check_empty_body", "POST", "/v1/check", "key", ``, 400, "malformed_json"},
		{"check_route_without_leading_slash", "POST", "/v1/check", "key", `{"route": "api/payments/1", "subject": "u"}`, 400, "invalid_request"},
		{"check_array_body", "POST", "/v1/check", "key", `[1]`, 400, "malformed_json"},
		{"check_two_objects", "POST", "/v1/check", "key", `{"route": "/a"} {"route": "/b"}`, 400, "malformed_json"},
		{"check_unknown_field", "POST", "/v1/check", "key", `{"route": "/api/payments", "tenant": "other"}`, 400, "unknown_field"},
		{"check_oversized_body", "POST", "/v1/check", "key", huge, 413, "body_too_large"},
		{"check_missing_route", "POST", "/v1/check", "key", `{"subject": "u"}`, 400, "invalid_request"},
		{"check_empty_route", "POST", "/v1/check", "key", `{"route": ""}`, 400, "invalid_request"},
		{"check_10kb_route", "POST", "/v1/check", "key", `{"route": "` + long + `"}`, 400, "invalid_request"},
		{"check_negative_cost", "POST", "/v1/check", "key", `{"route": "/api/payments", "cost": -1}`, 400, "invalid_request"},
		{"check_fractional_cost", "POST", "/v1/check", "key", `{"route": "/api/payments", "cost": 1.5}`, 400, "invalid_request"},
		{"check_string_cost", "POST", "/v1/check", "key", `{"route": "/api/payments", "cost": "1"}`, 400, "invalid_request"},
		{"check_huge_cost", "POST", "/v1/check", "key", `{"route": "/api/payments", "cost": 1e30}`, 400, "invalid_request"},
		{"check_cost_that_can_never_fit", "POST", "/v1/check", "key", `{"route": "/api/payments", "cost": 11}`, 400, "invalid_request"},
		{"check_oversized_subject", "POST", "/v1/check", "key", `{"route": "/api/payments", "subject": "` + strings.Repeat("s", 1100) + `"}`, 400, "invalid_request"},
		{"check_plan_on_rule_without_plans", "POST", "/v1/check", "key", `{"route": "/api/payments", "subject": "u", "plan": "pro"}`, 400, "invalid_request"},
		{"check_oversized_plan", "POST", "/v1/check", "key", `{"route": "/api/payments", "plan": "` + strings.Repeat("p", 65) + `"}`, 400, "invalid_request"},
		{"check_route_wrong_type", "POST", "/v1/check", "key", `{"route": 17}`, 400, "invalid_request"},
		{"check_field_in_other_case", "POST", "/v1/check", "key", `{"ROUTE": "/api/payments"}`, 400, "unknown_field"},
		{"check_duplicate_field", "POST", "/v1/check", "key", `{"route": "/api/payments", "subject": "a", "subject": "b"}`, 400, "duplicate_field"},
		{"check_invalid_utf8_subject", "POST", "/v1/check", "key", "{\"route\": \"/api/payments\", \"subject\": \"\xff\"}", 400, "invalid_request"},
		{"check_unpaired_surrogate_subject", "POST", "/v1/check", "key", `{"route": "/api/payments", "subject": "\ud800"}`, 400, "invalid_request"},
		{"check_nul_subject", "POST", "/v1/check", "key", `{"route": "/api/payments", "subject": "a\u0000"}`, 400, "invalid_request"},

		// tenants
		{"tenant_duplicate_name", "POST", "/v1/tenants", "", `{"name": "acme"}`, 409, "conflict"},
		{"tenant_invalid_name", "POST", "/v1/tenants", "", `{"name": "Acme Corp!"}`, 400, "invalid_request"},
		{"tenant_empty_name", "POST", "/v1/tenants", "", `{"name": ""}`, 400, "invalid_request"},
		{"tenant_name_too_long", "POST", "/v1/tenants", "", `{"name": "` + strings.Repeat("a", 64) + `"}`, 400, "invalid_request"},
		{"tenant_unknown_field", "POST", "/v1/tenants", "", `{"name": "x", "plan": "gold"}`, 400, "unknown_field"},
		{"tenant_unknown_status", "PATCH", "/v1/tenants/acme", "", `{"status": "paused"}`, 400, "invalid_request"},
		{"tenant_missing_status", "PATCH", "/v1/tenants/acme", "", `{}`, 400, "invalid_request"},
		{"tenant_unknown_suspend", "PATCH", "/v1/tenants/nobody", "", `{"status": "suspended"}`, 404, "not_found"},
		{"tenant_unknown_get", "GET", "/v1/tenants/nobody", "", ``, 404, "not_found"},
		{"tenant_unknown_delete", "DELETE", "/v1/tenants/nobody", "", ``, 404, "not_found"},
		{"tenant_nul_name", "POST", "/v1/tenants", "", `{"name": "x\u0000"}`, 400, "invalid_request"},
		{"tenant_duplicate_field", "POST", "/v1/tenants", "", `{"name": "x", "name": "y"}`, 400, "duplicate_field"},
		{"tenant_status_in_other_case", "PATCH", "/v1/tenants/acme", "", `{"Status": "suspended"}`, 400, "unknown_field"},
		{"tenant_oversized_body", "POST", "/v1/tenants", "", `{"name": "` + strings.Repeat("a", 70<<10) + `"}`, 413, "body_too_large"},

		// keys
		{"key_unknown_tenant", "POST", "/v1/tenants/nobody/keys", "", `{"role": "check"}`, 404, "not_found"},
		{"key_unknown_role", "POST", "/v1/tenants/acme/keys", "", `{"role": "root"}`, 400, "invalid_request"},
		{"key_missing_role", "POST", "/v1/tenants/acme/keys", "", `{"name": "web"}`, 400, "invalid_request"},
		{"key_invalid_name", "POST", "/v1/tenants/acme/keys", "", `{"name": "My Key", "role": "check"}`, 400, "invalid_request"},
		{"key_duplicate_name", "POST", "/v1/tenants/acme/keys", "", `{"name": "web", "role": "admin"}`, 409, "conflict"},
		{"key_unknown_tenant_list", "GET", "/v1/tenants/nobody/keys", "", ``, 404, "not_found"},
		{"rule_unknown_tenant_list", "GET", "/v1/tenants/nobody/rules", "", ``, 404, "not_found"},
		{"key_unknown_revoke", "DELETE", "/v1/tenants/acme/keys/key_nope", "", ``, 404, "not_found"},

		// rules
		{"rule_unknown_tenant", "PUT", "/v1/tenants/nobody/rules/r", "", tb(`, "capacity": 10, "refill_per_second": 1`), 404, "not_found"},
		{"rule_invalid_name", "PUT", "/v1/tenants/acme/rules/Bad_Name", "", tb(`, "capacity": 10, "refill_per_second": 1`), 400, "invalid_request"},
		{"rule_duplicate_route", "PUT", "/v1/tenants/acme/rules/other", "", `{"route": "/api/payments*", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 409, "conflict"},
		{"rule_zero_capacity", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 0, "refill_per_second": 1`), 400, "invalid_request"},
		{"rule_negative_capacity", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": -5, "refill_per_second": 1`), 400, "invalid_request"},
		{"rule_fractional_capacity", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 2.5, "refill_per_second": 1`), 400, "invalid_request"},
		{"rule_negative_refill", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 10, "refill_per_second": -1`), 400, "invalid_request"},
		{"rule_zero_refill", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 10, "refill_per_second": 0`), 400, "invalid_request"},
		{"rule_nan_refill", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 10, "refill_per_second": NaN`), 400, "malformed_json"},
		{"rule_nan_refill_as_string", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 10, "refill_per_second": "NaN"`), 400, "invalid_request"},
		{"rule_missing_refill", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 10`), 400, "invalid_request"},
		{"rule_bucket_with_window", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 10, "refill_per_second": 1, "window": "1m"`), 400, "invalid_request"},
		{"rule_zero_window", "PUT", "/v1/tenants/acme/rules/r", "", win(`, "limit": 10, "window": "0s"`), 400, "invalid_request"},
		{"rule_bad_window", "PUT", "/v1/tenants/acme/rules/r", "", win(`, "limit": 10, "window": "a minute"`), 400, "invalid_request"},
		{"rule_zero_limit", "PUT", "/v1/tenants/acme/rules/r", "", win(`, "limit": 0, "window": "1m"`), 400, "invalid_request"},
		{"rule_window_with_capacity", "PUT", "/v1/tenants/acme/rules/r", "", win(`, "capacity": 10, "window": "1m"`), 400, "invalid_request"},
		{"rule_unknown_algorithm", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/x", "limits": [{"algorithm": "leaky_bucket", "capacity": 1}]}`, 400, "invalid_request"},
		{"rule_no_limits", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/x", "limits": []}`, 400, "invalid_request"},
		{"rule_duplicate_limit_names", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/x", "limits": [{"name": "a", "algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}, {"name": "a", "algorithm": "fixed_window", "limit": 1, "window": "1s"}]}`, 400, "invalid_request"},
		{"rule_empty_route", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "invalid_request"},
		{"rule_10kb_route", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "` + long + `", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "invalid_request"},
		{"rule_route_star_in_middle", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/api/*/x", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "invalid_request"},
		{"rule_route_without_slash", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "api", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "invalid_request"},
		{"rule_route_with_space", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/a b", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "invalid_request"},
		{"rule_unknown_failure_mode", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/x", "failure_mode": "sometimes", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "invalid_request"},
		{"rule_unknown_field", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/x", "limit": 5, "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "unknown_field"},
		{"rule_unknown_limit_field", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 1, "refill_per_second": 1, "burst": 3`), 400, "unknown_field"},
		{"rule_unknown_get", "GET", "/v1/tenants/acme/rules/nope", "", ``, 404, "not_found"},
		{"rule_unknown_delete", "DELETE", "/v1/tenants/acme/rules/nope", "", ``, 404, "not_found"},
		{"unknown_endpoint", "GET", "/v1/nothing", "", ``, 404, "not_found"},
		{"wrong_method", "GET", "/v1/check", "key", ``, 405, "method_not_allowed"},
		{"rule_field_in_other_case", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/x", "Limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "unknown_field"},
		{"rule_duplicate_field", "PUT", "/v1/tenants/acme/rules/r", "", `{"route": "/x", "route": "/y", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`, 400, "duplicate_field"},
		{"rule_nul_limit_name", "PUT", "/v1/tenants/acme/rules/r", "", tb(`, "capacity": 1, "refill_per_second": 1, "window": "\u0000"`), 400, "invalid_request"},
		{"reset_nul_subject", "DELETE", "/v1/tenants/acme/rules/payments/subjects/a%00b", "", ``, 400, "invalid_request"},
		{"reset_invalid_utf8_subject", "DELETE", "/v1/tenants/acme/rules/payments/subjects/%FF%FE", "", ``, 400, "invalid_request"},
		{"reset_invalid_tenant", "DELETE", "/v1/tenants/ac%00me/rules/payments/subjects/u", "", ``, 400, "invalid_request"},
		{"get_tenant_invalid_utf8", "GET", "/v1/tenants/%C3", "", ``, 400, "invalid_request"},
		{"rule_unknown_subject_reset", "DELETE", "/v1/tenants/acme/rules/nope/subjects/u", "", ``, 404, "not_found"},
	}

	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := h.with(t)
			versionBefore, err := h.catalog.Version(ctx)
			if err != nil {
				t.Fatal(err)
			}
			countersBefore := store.Len()
			auth := testAdminToken
			if c.auth == "key" {
				auth = key
			}
			var body any
			if c.body != "" {
				body = c.body
			}
			r := h.do(c.method, c.path, auth, body)
			if r.status != c.status || r.errorCode() != c.code {
				t.Fatalf("got %d %s, want %d %s", r.status, r.raw, c.status, c.code)
			}
			msg := r.body["error"].(map[string]any)["message"].(string)
			if len(msg) < 10 || !strings.HasSuffix(msg, ".") || strings.ToUpper(msg[:1]) != msg[:1] {
				t.Errorf("message %q is not a sentence", msg)
			}
			if strings.Contains(msg, "json: ") || strings.Contains(msg, "Go struct") {
				t.Errorf("message %q leaks decoder internals", msg)
			}
			if v, _ := h.catalog.Version(ctx); v != versionBefore {
				t.Errorf("catalog version moved from %d to %d", versionBefore, v)
			}
			if n := store.Len(); n != countersBefore {
				t.Errorf("store counters went from %d to %d", countersBefore, n)
			}
		})
	}

	// The rules are as they were: the first check sees a full bucket.
	r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/api/payments", "cost": 0})
	if r.body["remaining"].(float64) != 10 {
		t.Errorf("after bad input, remaining = %v, want 10", r.body["remaining"])
	}
}
