package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestMetricsOnTheServiceListenerNameNoTenant: an unauthenticated GET of
// /metrics on --addr names no tenant or rule, though a tenant's checks were
// counted; the operator token reads them there; with --metrics-addr they are
// served on that listener without credentials.
func TestMetricsOnTheServiceListenerNameNoTenant(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("metrics_addr_%v", separate), func(t *testing.T) {
			token := "metrics-test-admin-token-0123456789abcdef"
			cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"), AdminToken: token,
				StoreTimeout: time.Second, DefaultFailureMode: "closed", ShutdownTimeout: time.Second, LogLevel: "error"}
			metricsURL := ""
			if separate {
				cfg.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
				metricsURL = "http://" + cfg.MetricsAddr + "/metrics"
			}
			ctx, cancel := context.WithCancel(context.Background())
			svc, err := startService(ctx, cfg, &testenv.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cancel(); <-svc.done })
			base := "http://" + svc.Addr
			if metricsURL == "" {
				metricsURL = base + "/metrics"
			}
			call := func(method, url, auth, body string) (int, string) {
				t.Helper()
				req, _ := http.NewRequest(method, url, strings.NewReader(body))
				if auth != "" {
					req.Header.Set("Authorization", "Bearer "+auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(raw)
			}
			call("POST", base+"/v1/tenants", token, `{"name": "other"}`)
			call("PUT", base+"/v1/tenants/other/rules/secret-rule", token, `{"route": "*", "limits": [{"algorithm": "token_bucket", "capacity": 5, "refill_per_second": 1}]}`)
			_, raw := call("POST", base+"/v1/tenants/other/keys", token, `{"role": "check"}`)
			secret := raw[strings.Index(raw, `"secret":"`)+10:]
			secret = secret[:strings.Index(secret, `"`)]
			if status, _ := call("POST", base+"/v1/check", secret, `{"route": "/x"}`); status != http.StatusOK {
				t.Fatalf("check: %d", status)
			}

			status, body := call("GET", metricsURL, "", "")
			if separate {
				if status != http.StatusOK || !strings.Contains(body, `tenant="other"`) {
					t.Errorf("unauthenticated /metrics on --metrics-addr: %d, names tenant other: %v", status, strings.Contains(body, `tenant="other"`))
				}
				return
			}
			if status != http.StatusOK || strings.Contains(body, `"other"`) || strings.Contains(body, "secret-rule") || !strings.Contains(body, "process_cpu_seconds_total") {
				t.Errorf("unauthenticated /metrics on --addr: %d; want 200 with the process series and no tenant or rule:\n%s", status, body)
			}
			if status, body := call("GET", metricsURL, token, ""); status != http.StatusOK || !strings.Contains(body, `tenant="other"`) || !strings.Contains(body, `rule="secret-rule"`) {
				t.Errorf("/metrics with the operator token: %d, names tenant other and its rule: %v", status, strings.Contains(body, `rule="secret-rule"`))
			}
			// A metrics-role key (the SQLite catalog takes the role too)
			// reads its own tenant's series.
			status, raw = call("POST", base+"/v1/tenants/other/keys", token, `{"role": "metrics"}`)
			if status != http.StatusCreated {
				t.Fatalf("create a metrics key: %d %s", status, raw)
			}
			metricsKey := raw[strings.Index(raw, `"secret":"`)+10:]
			metricsKey = metricsKey[:strings.Index(metricsKey, `"`)]
			if status, body := call("GET", metricsURL, metricsKey, ""); status != http.StatusOK || !strings.Contains(body, `rule="secret-rule"`) {
				t.Errorf("/metrics with the tenant's metrics key: %d, names its rule: %v", status, strings.Contains(body, `rule="secret-rule"`))
			}
		})
	}
}
