package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricsNameTenantsOnlyToThoseAllowed: on the service's listener,
// /metrics without credentials names no tenant or rule; the operator token
// reads every series; a metrics-role key reads its own tenant's only; a
// check or admin key is refused (403), an unknown one 401; and a metrics
// key can neither check nor manage.
func TestMetricsNameTenantsOnlyToThoseAllowed(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, tenant := range []string{"acme", "beta"} {
		h.createTenant(tenant)
		h.putRule(tenant, tenant+"-secret-rule", map[string]any{"route": "*", "limits": []any{
			map[string]any{"algorithm": "token_bucket", "capacity": 5, "refill_per_second": 1}}})
		key, _ := h.createKey(tenant, "check")
		h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/x", "subject": "u"})
	}
	metricsKey, _ := h.createKey("acme", "metrics")
	checkKey, _ := h.createKey("acme", "check")
	adminKey, _ := h.createKey("acme", "admin")
	srv := httptest.NewServer(h.api.MetricsHandler(h.reg))
	t.Cleanup(srv.Close)
	get := func(secret string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	names := []string{`tenant="acme"`, `tenant="beta"`, "acme-secret-rule", "beta-secret-rule"}
	for _, tc := range []struct {
		name, secret string
		status       int
		shown        []string
	}{
		{"no_credentials", "", http.StatusOK, nil},
		{"operator", testAdminToken, http.StatusOK, names},
		{"metrics_key", metricsKey, http.StatusOK, []string{`tenant="acme"`, "acme-secret-rule"}},
		{"check_key", checkKey, http.StatusForbidden, nil},
		{"admin_key", adminKey, http.StatusForbidden, nil},
		{"unknown_key", "sk_unknown", http.StatusUnauthorized, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := get(tc.secret)
			if status != tc.status {
				t.Fatalf("GET /metrics: %d, want %d\n%.300s", status, tc.status, body)
			}
			for _, n := range names {
				want := strings.Contains(strings.Join(tc.shown, " "), n)
				if got := strings.Contains(body, n); got != want {
					t.Errorf("GET /metrics shows %s: %v, want %v", n, got, want)
				}
			}
			if status == http.StatusOK && !strings.Contains(body, "sluice_catalog_snapshot_age_seconds") {
				t.Errorf("GET /metrics lacks the series that name no tenant:\n%.500s", body)
			}
		})
	}
	if r := h.do("POST", "/v1/check", metricsKey, map[string]any{"route": "/x"}); r.status != http.StatusForbidden || r.errorCode() != "wrong_role" {
		t.Errorf("a check with a metrics key: %d %s", r.status, r.raw)
	}
	if r := h.do("GET", "/v1/tenants/acme/rules", metricsKey, nil); r.status != http.StatusForbidden || r.errorCode() != "wrong_role" {
		t.Errorf("an admin call with a metrics key: %d %s", r.status, r.raw)
	}
}
