package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

func envoyTestDir(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const envoyTestConfig = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// postJSON posts body to url's /json and returns the status.
func postJSON(t *testing.T, url, body string) int {
	t.Helper()
	r, err := http.Post(url+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode
}

// getHealth returns the status of url's GET /healthcheck, and its body.
func getHealth(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.Get(url + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

const envoyTestJSONBody = `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "u"}]}]}`

// TestServeKeepsEnvoyJSONOffTheTenantListener: POST /json takes no
// credentials, so sluice serve never mounts it on --addr, only on
// --envoy-json-addr when asked.
func TestServeKeepsEnvoyJSONOffTheTenantListener(t *testing.T) {
	dir := envoyTestDir(t, envoyTestConfig)
	for _, withJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("envoy_json_addr_%v", withJSON), func(t *testing.T) {
			cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"),
				AdminToken: "envoy-json-test-admin-token-0123456789abcdef", EnvoyConfig: dir, StoreTimeout: time.Second,
				DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "error"}
			if withJSON {
				cfg.EnvoyJSONAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			}
			ctx, cancel := context.WithCancel(context.Background())
			svc, err := startService(ctx, cfg, &testenv.Buffer{})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			defer func() {
				cancel()
				if err := <-svc.done; err != nil {
					t.Errorf("serve: %v", err)
				}
			}()
			main := "http://" + svc.Addr
			if got := postJSON(t, main, envoyTestJSONBody); got != http.StatusNotFound && got != http.StatusMethodNotAllowed {
				t.Fatalf("POST /json on --addr: %d, want 404 or 405", got)
			}
			if code, _ := getHealth(t, main); code != 200 {
				t.Fatalf("GET /healthcheck on --addr: %d, want 200", code)
			}
			if withJSON {
				if got := postJSON(t, "http://"+cfg.EnvoyJSONAddr, envoyTestJSONBody); got != 200 {
					t.Fatalf("POST /json on --envoy-json-addr: %d, want 200", got)
				}
			}
		})
	}
}
