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

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestServeEnvoyFlags runs sluice serve with envoyproxy/ratelimit's
// behaviours switched on by their flags, asks over gRPC, and reads the
// decision back from /metrics under its domain.
func TestServeEnvoyFlags(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"team/a.conf": "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n    metadata: {tier: gold}\n",
		"team/b.yaml": "domain: api\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
		".swap.yaml~": "garbage: [",
	} {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := serveConfig{Addr: "127.0.0.1:0", GRPCAddr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		Database:   "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"),
		AdminToken: "envoy-flags-test-admin-token-0123456789abcdef", EnvoyConfig: dir, StoreTimeout: time.Second,
		DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "error",
		EnvoyResponseHeaders: true,
		Envoy: envoyFlags{MergeDomains: true, IgnoreDotfiles: true, HeaderStyle: "envoy", HeaderLimit: "X-Limit",
			HeaderRemaining: "RateLimit-Remaining", HeaderReset: "RateLimit-Reset", Shadow: true, DynamicMetadata: true}}
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
	conn, err := grpc.NewClient(cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	ask := func() *rlspb.RateLimitResponse {
		t.Helper()
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		resp, err := c.ShouldRateLimit(rctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "10.0.0.1"}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := ask()
	if md := first.GetDynamicMetadata().GetFields(); md["domain"].GetStringValue() != "api" || md["metadata"].GetStructValue().GetFields()["tier"].GetStringValue() != "gold" {
		t.Fatalf("dynamic metadata %v, want the domain and the matched rule's metadata", first.GetDynamicMetadata())
	}
	headers := map[string]string{}
	for _, h := range first.GetResponseHeadersToAdd() {
		headers[h.GetKey()] = h.GetValue()
	}
	if headers["X-Limit"] != "1" || headers["RateLimit-Remaining"] != "0" || headers["RateLimit-Reset"] == "" {
		t.Fatalf("headers %v, want X-Limit 1, RateLimit-Remaining 0 and RateLimit-Reset", headers)
	}
	// Over the user's limit, but in shadow mode: OK, and the status says why.
	second := ask()
	if second.GetOverallCode() != rlspb.RateLimitResponse_OK || second.GetStatuses()[0].GetCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("shadow mode answered %v", second)
	}

	// Series that name a domain are the operator's to read on --addr.
	req, _ := http.NewRequest(http.MethodGet, "http://"+svc.Addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer envoy-flags-test-admin-token-0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := map[string]bool{`result="allowed"`: false, `result="shadow_denied"`: false}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "sluice_decisions_total{") || !strings.Contains(line, `domain="api"`) || !strings.Contains(line, `source="envoy"`) || !strings.Contains(line, `rule="user"`) {
			continue
		}
		for result := range want {
			if strings.Contains(line, result) {
				want[result] = true
			}
		}
	}
	for result, seen := range want {
		if !seen {
			t.Errorf("no sluice_decisions_total{source=\"envoy\", domain=\"api\", rule=\"user\", %s} in /metrics", result)
		}
	}
}
