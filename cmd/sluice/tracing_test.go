package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// otlpCollector is an OTLP/gRPC trace receiver: what a collector is to the
// service, minus everything but keeping the spans it is sent.
type otlpCollector struct {
	collectortracepb.UnimplementedTraceServiceServer
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	requests []*collectortracepb.ExportTraceServiceRequest // every export, whole
}

func (c *otlpCollector) Export(_ context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, req)
	for _, rs := range req.ResourceSpans {
		if v := attr(rs.GetResource().GetAttributes(), "service.name"); v != "" {
			c.services = append(c.services, v)
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	return &collectortracepb.ExportTraceServiceResponse{}, nil
}

// find returns the first span received that satisfies match.
func (c *otlpCollector) find(match func(*tracepb.Span) bool) *tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if match(s) {
			return s
		}
	}
	return nil
}

// await polls until a span satisfying match has been received.
func (c *otlpCollector) await(t *testing.T, what string, match func(*tracepb.Span) bool) *tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // generous: the batcher exports every 50 ms
	for time.Now().Before(deadline) {
		if s := c.find(match); s != nil {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, len(c.spans))
	for i, s := range c.spans {
		names[i] = s.Name
	}
	t.Fatalf("no %s span received; received %q", what, names)
	return nil
}

func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			switch v := kv.Value.Value.(type) {
			case *commonpb.AnyValue_StringValue:
				return v.StringValue
			case *commonpb.AnyValue_BoolValue:
				return fmt.Sprint(v.BoolValue)
			case *commonpb.AnyValue_IntValue:
				return fmt.Sprint(v.IntValue)
			case *commonpb.AnyValue_DoubleValue:
				return fmt.Sprint(v.DoubleValue)
			}
		}
	}
	return ""
}

// startCollector serves an OTLP/gRPC trace receiver on a loopback port and
// points the process's OTLP exporter variables at it.
func startCollector(t *testing.T) *otlpCollector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &otlpCollector{}
	gs := grpc.NewServer()
	collectortracepb.RegisterTraceServiceServer(gs, c)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	return c
}

// A caller's trace: the service's spans must join it.
const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
)

func inCallerTrace(s *tracepb.Span) bool {
	return hex.EncodeToString(s.TraceId) == callerTraceID
}

// TestServeExportsTracesOverOTLP: with OTEL_EXPORTER_OTLP_* set, sluice
// serve exports spans to a real OTLP/gRPC receiver: admin calls, HTTP and
// gRPC checks joining the caller's W3C trace context, and under each check
// the check engine's span with tenant, rule, decision and store time. The
// access log's records of the checks carry the caller's trace ID.
func TestServeExportsTracesOverOTLP(t *testing.T) {
	collector := startCollector(t)
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	const token = "trace-test-admin-token-0123456789abcdef"
	cfg := serveConfig{Addr: "127.0.0.1:0", GRPCAddr: grpcAddr, EnvoyConfig: envoyTestDir(t, envoyTestConfig),
		Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"), AdminToken: token,
		StoreTimeout: time.Second, DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "info",
		AccessLog: true, AccessLogSample: 1}
	ctx, cancel := context.WithCancel(context.Background())
	var logs testenv.Buffer
	svc, err := startService(ctx, cfg, &logs)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-svc.done })
	base := "http://" + svc.Addr

	call := func(method, path, secret, body string, header http.Header) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := call("POST", "/v1/tenants", token, `{"name":"acme"}`, nil); got != http.StatusCreated {
		t.Fatalf("create tenant: %d", got)
	}
	if got := call("PUT", "/v1/tenants/acme/rules/orders", token,
		`{"route":"/api/orders*","limits":[{"name":"hour","algorithm":"fixed_window","limit":5,"window":"1h"}]}`, nil); got != http.StatusCreated {
		t.Fatalf("put rule: %d", got)
	}
	key := createKey(t, base, token, "acme")

	traceparent := http.Header{"Traceparent": {"00-" + callerTraceID + "-" + callerSpanID + "-01"}}
	if got := call("POST", "/v1/check", key, `{"route":"/api/orders/17","subject":"u1"}`, traceparent); got != http.StatusOK {
		t.Fatalf("check: %d", got)
	}

	admin := collector.await(t, "admin call", func(s *tracepb.Span) bool { return s.Name == "PUT /v1/tenants/{tenant}/rules/{name}" })
	if s := admin.Kind; s != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("admin span kind %v, want server", s)
	}
	httpSpan := collector.await(t, "HTTP check", func(s *tracepb.Span) bool { return s.Name == "POST /v1/check" && inCallerTrace(s) })
	if got := hex.EncodeToString(httpSpan.ParentSpanId); got != callerSpanID {
		t.Errorf("the HTTP check span's parent is %s, want the caller's span %s", got, callerSpanID)
	}
	check := collector.await(t, "engine check under the HTTP check", func(s *tracepb.Span) bool {
		return s.Name == "sluice.check" && bytes.Equal(s.ParentSpanId, httpSpan.SpanId)
	})
	for k, want := range map[string]string{"sluice.tenant": "acme", "sluice.rule": "orders", "sluice.decision": "allowed",
		"sluice.deny_cache_hit": "false", "sluice.store.called": "true"} {
		if got := attr(check.Attributes, k); got != want {
			t.Errorf("check span %s = %q, want %q", k, got, want)
		}
	}
	if attr(check.Attributes, "sluice.store.duration_ms") == "" {
		t.Error("check span has no store duration")
	}

	// gRPC: the trace context comes in the call's metadata.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	callCtx, cancelCall := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelCall()
	callCtx = metadata.AppendToOutgoingContext(callCtx, "traceparent", "00-"+callerTraceID+"-"+callerSpanID+"-01")
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
	}}}
	if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(callCtx, req); err != nil {
		t.Fatal(err)
	}
	grpcSpan := collector.await(t, "gRPC check", func(s *tracepb.Span) bool {
		return s.Kind == tracepb.Span_SPAN_KIND_SERVER && inCallerTrace(s) && s.Name != "POST /v1/check"
	})
	if got := hex.EncodeToString(grpcSpan.ParentSpanId); got != callerSpanID {
		t.Errorf("the gRPC span %q's parent is %s, want the caller's span %s", grpcSpan.Name, got, callerSpanID)
	}
	envoyCheck := collector.await(t, "engine check under the gRPC call", func(s *tracepb.Span) bool {
		return s.Name == "sluice.check" && bytes.Equal(s.ParentSpanId, grpcSpan.SpanId)
	})
	if got := attr(envoyCheck.Attributes, "sluice.domain"); got != "api" {
		t.Errorf("gRPC check span domain %q, want api", got)
	}
	var httpAccess, grpcAccess bool
	for _, r := range logRecords(t, logs.String()) {
		if r["msg"] != "access" || r["trace_id"] != callerTraceID {
			continue
		}
		httpAccess = httpAccess || r["route"] == "POST /v1/check"
		grpcAccess = grpcAccess || r["method"] == "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" && r["overall_code"] == "OK"
	}
	if !httpAccess || !grpcAccess {
		t.Errorf("access records in the caller's trace: HTTP check %v, gRPC check %v; want both:\n%s", httpAccess, grpcAccess, logs.String())
	}
	collector.mu.Lock()
	services := collector.services
	collector.mu.Unlock()
	if len(services) == 0 || services[0] != "sluice" {
		t.Errorf("service.name %v, want sluice", services)
	}
}

// createKey creates a check-role key of tenant and returns its secret.
func createKey(t *testing.T, base, token, tenant string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/tenants/"+tenant+"/keys", bytes.NewBufferString(`{"name":"checks","role":"check"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var key struct{ Secret string }
	if err := json.NewDecoder(resp.Body).Decode(&key); err != nil || resp.StatusCode != http.StatusCreated || key.Secret == "" {
		t.Fatalf("create key: %d, %v", resp.StatusCode, err)
	}
	return key.Secret
}
