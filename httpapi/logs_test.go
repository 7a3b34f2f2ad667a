package httpapi

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/accesslog"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestFailedAuthenticationsAreLoggedRateLimited: each failed
// authentication is a warning saying which API, why, how the credential was
// sent and from where, never the credential; past the window's burst they
// are counted, and the next record says how many were left out.
func TestFailedAuthenticationsAreLoggedRateLimited(t *testing.T) {
	var logs testenv.Buffer
	h := newHarness(t, harnessOptions{logs: &logs})
	now := time.Unix(1_800_000_000, 0)
	h.api.authLog.throttle.Now = func() time.Time { return now }
	const wrong = "sk_wrong-secret-that-must-never-be-logged-0123"

	h.must(http.StatusUnauthorized, "POST", "/v1/check", wrong, map[string]any{"route": "/x"})
	h.must(http.StatusUnauthorized, "GET", "/v1/tenants", testAdminToken+"x", nil)
	h.must(http.StatusUnauthorized, "GET", "/v1/tenants", "", nil)
	got := testenv.Records(t, logs.String(), "authentication failed")
	if len(got) != 3 {
		t.Fatalf("%d records of failed authentications, want 3:\n%s", len(got), logs.String())
	}
	for i, want := range []map[string]any{
		{"api": "check", "reason": "invalid_api_key", "credential": "authorization", "route": "POST /v1/check", "remote": "127.0.0.1", "level": "WARN"},
		{"api": "admin", "reason": "invalid_credentials", "credential": "authorization", "route": "GET /v1/tenants"},
		{"api": "admin", "reason": "missing_credentials", "credential": "none"},
	} {
		for k, v := range want {
			if got[i][k] != v {
				t.Errorf("record %d: %s = %v, want %v", i, k, got[i][k], v)
			}
		}
	}

	for range 2 * accesslog.ThrottleBurst {
		h.must(http.StatusUnauthorized, "POST", "/v1/check", wrong, map[string]any{"route": "/x"})
	}
	if n := len(testenv.Records(t, logs.String(), "authentication failed")); n != accesslog.ThrottleBurst {
		t.Fatalf("%d records within one window, want the burst of %d", n, accesslog.ThrottleBurst)
	}
	now = now.Add(accesslog.ThrottleWindow)
	h.must(http.StatusUnauthorized, "POST", "/v1/check", wrong, map[string]any{"route": "/x"})
	got = testenv.Records(t, logs.String(), "authentication failed")
	if len(got) != accesslog.ThrottleBurst+1 {
		t.Fatalf("%d records after the window passed, want %d", len(got), accesslog.ThrottleBurst+1)
	}
	// 3 + 20 failures in the first window, 10 logged: 13 left out.
	if s := got[len(got)-1]["suppressed_before"]; s != float64(3+2*accesslog.ThrottleBurst-accesslog.ThrottleBurst) {
		t.Errorf("the next record says %v were left out, want %d", s, 3+2*accesslog.ThrottleBurst-accesslog.ThrottleBurst)
	}
	if strings.Contains(logs.String(), wrong) || strings.Contains(logs.String(), testAdminToken) {
		t.Fatal("a credential reached the log")
	}
}

// TestAccessLog: one record per request, by route pattern; denials, errors
// and admin calls always, allowed checks as sampled, successful probes
// never; no credential, no raw path.
func TestAccessLog(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "api", map[string]any{"route": "/api*", "limits": []any{
		map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 1, "window": "1h"}}})

	logged := func(t *testing.T, sample float64) (*harness, *testenv.Buffer) {
		var logs testenv.Buffer
		srv := httptest.NewServer(AccessLog(h.api.handler(), AccessLogOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), SampleAllowed: sample}))
		t.Cleanup(srv.Close)
		c := *h.with(t)
		c.srv = srv
		return &c, &logs
	}

	t.Run("sample_none", func(t *testing.T) {
		l, logs := logged(t, 0)
		l.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/api/a", "subject": "secret-subject"})
		l.must(http.StatusTooManyRequests, "POST", "/v1/check", key, map[string]any{"route": "/api/a", "subject": "secret-subject"})
		l.must(http.StatusUnauthorized, "POST", "/v1/check", "sk_nope-nope-nope-0123456789", map[string]any{"route": "/api/a"})
		l.must(http.StatusOK, "GET", "/healthz", "", nil)
		l.must(http.StatusOK, "GET", "/v1/tenants", testAdminToken, nil)
		l.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/api/subjects/secret-subject", testAdminToken, nil)
		l.must(http.StatusNotFound, "GET", "/nowhere", "", nil)
		got := testenv.Records(t, logs.String(), "access")
		want := []struct {
			route  string
			status float64
		}{
			{"POST /v1/check", 429},
			{"POST /v1/check", 401},
			{"GET /v1/tenants", 200},
			{"DELETE /v1/tenants/{tenant}/rules/{name}/subjects/{subject...}", 204},
			{"unmatched", 404},
		}
		if len(got) != len(want) {
			t.Fatalf("%d access records, want %d:\n%s", len(got), len(want), logs.String())
		}
		for i, w := range want {
			if got[i]["route"] != w.route || got[i]["status"] != w.status {
				t.Errorf("record %d: %v %v, want %s %v", i, got[i]["route"], got[i]["status"], w.route, w.status)
			}
			for _, field := range []string{"method", "duration_ms", "bytes", "remote"} {
				if _, ok := got[i][field]; !ok {
					t.Errorf("record %d lacks %s", i, field)
				}
			}
		}
		for _, secret := range []string{key, testAdminToken, "secret-subject"} {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("the access log holds %q", secret)
			}
		}
	})
	t.Run("sample_all", func(t *testing.T) {
		l, logs := logged(t, 1)
		l.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/api/a", "subject": "other"})
		got := testenv.Records(t, logs.String(), "access")
		if len(got) != 1 || got[0]["status"] != float64(200) || got[0]["sampled"] != float64(1) {
			t.Fatalf("allowed check at sample 1: %v, want one record saying it was sampled at 1", got)
		}
	})
}
