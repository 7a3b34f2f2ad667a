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

func TestStartEnvoyServesGRPCAndJSON(t *testing.T) {
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer engine.Close()
	t.Cleanup(func() { store.Close() })
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	mux := http.NewServeMux()
	stop, err := startEnvoy(context.Background(), envoyConfig{
		GRPCAddr:  addr,
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

	// POST /json shares the counters: one left, then over.
	ts := httptest.NewServer(mux)
	defer ts.Close()
	body := `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "u"}]}]}`
	for _, want := range []int{200, 429} {
		r, err := http.Post(ts.URL+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != want {
			t.Fatalf("POST /json: %d, want %d", r.StatusCode, want)
		}
	}

	// envoyproxy/ratelimit's HTTP health path answers too.
	hr, err := http.Get(ts.URL + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	if hr.StatusCode != 200 || string(hb) != "OK" {
		t.Fatalf("GET /healthcheck: %d %q, want 200 OK", hr.StatusCode, hb)
	}

	stopped = true
	if err := stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req); err == nil {
		t.Fatal("answered after stop")
	}
	// The HTTP listener outlives the gRPC one during shutdown; its health
	// path must not say OK any more.
	if hr, err := http.Get(ts.URL + "/healthcheck"); err != nil || hr.StatusCode != 500 {
		t.Fatalf("GET /healthcheck after stop: %v, %v; want 500", hr, err)
	} else {
		hr.Body.Close()
	}
}

// TestStartEnvoyHTTPOnlyHealth: without --grpc-addr, POST /json still serves,
// and stopping turns GET /healthcheck to 500 so probes drain the instance.
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
