package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestSecretsNeverReachLogsOrMetrics runs a full scenario at debug level —
// keys created, used, misused and revoked, the store going down and coming
// back — and looks for every secret and every spelling of its hash in the
// service's whole output and in /metrics.
func TestSecretsNeverReachLogsOrMetrics(t *testing.T) {
	redis := testenv.Redis(t)
	const token = "secrets-test-admin-token-0123456789"
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"),
		Redis: redis.URL(), RedisPrefix: "sluice:", AdminToken: token, StoreTimeout: guard.DefaultTimeout,
		DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "debug"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var output testenv.Buffer
	svc, err := startService(ctx, cfg, &output)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + svc.Addr
	call := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	mustCall := func(want int, method, path, auth, body string) string {
		t.Helper()
		status, answer := call(method, path, auth, body)
		if status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, status, answer, want)
		}
		return answer
	}
	secrets := []string{token}
	createKey := func(tenant, role string) (secret, id string) {
		t.Helper()
		var k struct{ Secret, ID string }
		_ = json.Unmarshal([]byte(mustCall(http.StatusCreated, "POST", "/v1/tenants/"+tenant+"/keys", token, `{"role": "`+role+`"}`)), &k)
		secrets = append(secrets, k.Secret)
		return k.Secret, k.ID
	}

	mustCall(http.StatusCreated, "POST", "/v1/tenants", token, `{"name": "acme"}`)
	mustCall(http.StatusCreated, "POST", "/v1/tenants", token, `{"name": "globex"}`)
	check, checkID := createKey("acme", "check")
	admin, _ := createKey("acme", "admin")
	globex, _ := createKey("globex", "check")
	mustCall(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", admin,
		`{"route": "/api*", "limits": [{"algorithm": "fixed_window", "limit": 1, "window": "1h"}]}`)
	checkBody := `{"route": "/api/x", "subject": "user-42"}`
	mustCall(http.StatusOK, "POST", "/v1/check", check, checkBody)
	mustCall(http.StatusTooManyRequests, "POST", "/v1/check", check, checkBody)
	mustCall(http.StatusTooManyRequests, "POST", "/v1/check", check, checkBody) // deny cache
	mustCall(http.StatusForbidden, "POST", "/v1/check", admin, checkBody)
	mustCall(http.StatusForbidden, "POST", "/v1/check", token, checkBody)
	mustCall(http.StatusUnauthorized, "POST", "/v1/check", "sk_"+strings.Repeat("x", 43), checkBody)
	mustCall(http.StatusBadRequest, "POST", "/v1/check", check, `{"route": `)
	mustCall(http.StatusForbidden, "GET", "/v1/tenants/globex/rules", admin, "")
	mustCall(http.StatusForbidden, "GET", "/v1/tenants/acme/rules", check, "")
	mustCall(http.StatusUnauthorized, "GET", "/v1/tenants", token+"x", "")
	mustCall(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/api/subjects/user-42", admin, "")
	mustCall(http.StatusOK, "PATCH", "/v1/tenants/globex", token, `{"status": "suspended"}`)
	mustCall(http.StatusForbidden, "POST", "/v1/check", globex, checkBody)

	redis.Stop()
	mustCall(http.StatusServiceUnavailable, "POST", "/v1/check", check, checkBody)
	mustCall(http.StatusServiceUnavailable, "GET", "/readyz", "", "")
	for range 10 { // enough failures to open the breaker
		call("POST", "/v1/check", check, checkBody)
	}
	call("DELETE", "/v1/tenants/acme/rules/api/subjects/user-42", token, "")
	redis.Start()
	testenv.Eventually(t, 10*time.Second, "checks recover after Redis restarted", func() bool {
		status, _ := call("POST", "/v1/check", check, `{"route": "/api/x", "subject": "other"}`)
		return status == http.StatusOK
	})
	mustCall(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+checkID, admin, "")
	mustCall(http.StatusUnauthorized, "POST", "/v1/check", check, checkBody)
	metricsText := mustCall(http.StatusOK, "GET", "/metrics", token, "") // every series

	cancel()
	if err := <-svc.done; err != nil {
		t.Fatal(err)
	}
	logs := output.String()
	// The scenario must have logged something to look through.
	for _, want := range []string{"not ready", "circuit breaker", "shutting down"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %q; the scenario did not run as intended:\n%s", want, logs)
		}
	}
	for _, secret := range secrets {
		hash := sluice.HashAPIKey(secret)
		for _, spelling := range []string{secret, hex.EncodeToString(hash), strings.ToUpper(hex.EncodeToString(hash)),
			base64.StdEncoding.EncodeToString(hash), base64.RawURLEncoding.EncodeToString(hash)} {
			if strings.Contains(logs, spelling) {
				t.Errorf("the logs hold a secret or its hash (%.8s...):\n%s", spelling, logs)
			}
			if strings.Contains(metricsText, spelling) {
				t.Errorf("/metrics holds a secret or its hash (%.8s...)", spelling)
			}
		}
	}
}
