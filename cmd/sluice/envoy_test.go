package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
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

func TestStartEnvoyConfigurationErrors(t *testing.T) {
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer engine.Close()
	t.Cleanup(func() { store.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name    string
		cfg     envoyConfig
		wantErr string
	}{
		{"grpc_without_config", envoyConfig{GRPCAddr: "127.0.0.1:0", Engine: engine, Logger: quiet}, "--envoy-config"},
		{"json_without_config", envoyConfig{JSONAddr: "127.0.0.1:0", Engine: engine, Logger: quiet}, "--envoy-config"},
		{"json_addr_taken", envoyConfig{JSONAddr: "256.0.0.1:1", ConfigDir: envoyTestDir(t, envoyTestConfig)}, "--envoy-json-addr"},
		{"missing_directory", envoyConfig{ConfigDir: filepath.Join(t.TempDir(), "nope"), Engine: engine, Logger: quiet}, "--envoy-config"},
		{"broken_file", envoyConfig{ConfigDir: envoyTestDir(t, "domain: [")}, "api.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Engine == nil {
				tt.cfg.Engine, tt.cfg.Logger = engine, quiet
			}
			stop, err := startEnvoy(context.Background(), tt.cfg)
			if err == nil {
				stop(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestStartEnvoyOffWithoutFlags(t *testing.T) {
	stop, err := startEnvoy(context.Background(), envoyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

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

func TestStartEnvoyServesGRPCAndJSON(t *testing.T) {
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer engine.Close()
	t.Cleanup(func() { store.Close() })
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	jsonAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	mux := http.NewServeMux()
	stop, err := startEnvoy(context.Background(), envoyConfig{
		GRPCAddr:  addr,
		JSONAddr:  jsonAddr,
		ConfigDir: envoyTestDir(t, envoyTestConfig),
		Engine:    engine,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Mux:       mux,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop(context.Background())
		}
	})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
	}}}
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("gRPC: %v, %v", resp, err)
	}

	// POST /json is not on the tenant API's mux, even when configured.
	ts := httptest.NewServer(mux)
	defer ts.Close()
	if got := postJSON(t, ts.URL, envoyTestJSONBody); got != http.StatusNotFound && got != http.StatusMethodNotAllowed {
		t.Fatalf("POST /json on the main mux: %d, want 404 or 405", got)
	}
	// On its own listener it shares the counters: one left, then over.
	jsonURL := "http://" + jsonAddr
	for _, want := range []int{200, 429} {
		if got := postJSON(t, jsonURL, envoyTestJSONBody); got != want {
			t.Fatalf("POST /json on --envoy-json-addr: %d, want %d", got, want)
		}
	}

	// envoyproxy/ratelimit's HTTP health path answers on both.
	for _, url := range []string{ts.URL, jsonURL} {
		if code, body := getHealth(t, url); code != 200 || body != "OK" {
			t.Fatalf("GET %s/healthcheck: %d %q, want 200 OK", url, code, body)
		}
	}

	stopped = true
	if err := stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req); err == nil {
		t.Fatal("answered after stop")
	}
	if r, err := http.Post(jsonURL+"/json", "application/json", strings.NewReader(envoyTestJSONBody)); err == nil {
		r.Body.Close()
		t.Fatal("--envoy-json-addr answered after stop")
	}
	// The HTTP listener outlives the gRPC one during shutdown; its health
	// path must not say OK any more.
	if code, _ := getHealth(t, ts.URL); code != 500 {
		t.Fatalf("GET /healthcheck after stop: %d; want 500", code)
	}
}

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

// TestStartEnvoyHTTPOnlyHealth: without --grpc-addr, GET /healthcheck still
// serves on the main mux, and stopping turns it to 500 so probes drain the
// instance.
func TestStartEnvoyHTTPOnlyHealth(t *testing.T) {
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer engine.Close()
	t.Cleanup(func() { store.Close() })
	mux := http.NewServeMux()
	stop, err := startEnvoy(context.Background(), envoyConfig{
		ConfigDir: envoyTestDir(t, envoyTestConfig),
		Engine:    engine,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Mux:       mux,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mux)
	defer ts.Close()
	health := func() int {
		t.Helper()
		r, err := http.Get(ts.URL + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	if got := health(); got != 200 {
		t.Fatalf("GET /healthcheck while serving: %d, want 200", got)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := health(); got != 500 {
		t.Fatalf("GET /healthcheck after stop: %d, want 500", got)
	}
}
