package gateway_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/internal/accesslog"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/tracing"
)

// loggedGateway builds a Gateway of yamlConfig whose log is JSON in logs.
func loggedGateway(t *testing.T, yamlConfig string, logs *testenv.Buffer, tr *tracing.Tracing) *gateway.Gateway {
	t.Helper()
	cfg, err := gateway.ParseConfig([]byte(yamlConfig))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yamlConfig)
	}
	reg := prometheus.NewRegistry()
	gw, err := gateway.New(cfg, gateway.Options{Store: storeOf(t, cfg), Metrics: metrics.New(reg), Requests: metrics.NewGatewayRequests(reg), Gatherer: reg,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), Tracing: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	return gw
}

// waitForRecords polls until the log holds n records of msg: a record is
// written once the handler returns, which can be after the client has read
// the answer.
func waitForRecords(t *testing.T, logs *testenv.Buffer, msg string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := testenv.Records(t, logs.String(), msg)
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) != n {
				t.Fatalf("%d %q records, want %d:\n%s", len(got), msg, n, logs.String())
			}
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantFields fails unless rec holds every field of want with its value; a
// nil value in want means the field must be absent.
func wantFields(t *testing.T, name string, rec map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := rec[k]
		if v == nil {
			if ok {
				t.Errorf("%s: %s = %v, want no such field", name, k, got)
			}
			continue
		}
		if got != v {
			t.Errorf("%s: %s = %v, want %v (record %v)", name, k, got, v, rec)
		}
	}
}

const accessLogConfig = `
access_log: {enabled: true, sample: %v}
jwt:
  main: {hs256_secret_env: GW_TEST_SECRET, issuer: https://issuer.test, audience: [sluice-api]}
routes:
  - name: orders
    path_prefix: /api/orders
    upstream: %[2]q
    auth: main
    limits: [{name: one, algorithm: fixed_window, limit: 1, window: 1h}]
  - name: keyed
    path_prefix: /keyed
    upstream: %[2]q
    key: {header: X-API-Key}
    limits: [{name: one, algorithm: fixed_window, limit: 1, window: 1h}]
  - name: open
    path_prefix: /open
    upstream: %[2]q
`

// TestGatewayAccessLog: through a real listener and upstream, every request
// is one record naming its route (never the path or query), method,
// status, durations, the kind of key the limits counted by and their
// decision; no token or API key reaches any log line.
func TestGatewayAccessLog(t *testing.T) {
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	var logs testenv.Buffer
	gw := loggedGateway(t, fmt.Sprintf(accessLogConfig, 1, up.URL), &logs, nil)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)

	token := sign(t, jwt.SigningMethodHS256, []byte(hsSecret), claims("user-7"), "")
	forged := sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-at-least-32-bytes!!"), claims("user-7"), "")
	const apiKey = "ak_live_secret-key-that-must-never-be-logged"
	const path = "/api/orders/17?card=4111111111111111"

	steps := []struct {
		name, method, target string
		header               map[string]string
		status               int
		want                 map[string]any
	}{
		{"allowed", "GET", path, bearer(token), 200,
			map[string]any{"route": "orders", "method": "GET", "status": 200.0, "key": "sub", "decision": "allow", "sampled": 1.0}},
		{"denied", "POST", path, bearer(token), 429,
			map[string]any{"route": "orders", "method": "POST", "status": 429.0, "key": "sub", "decision": "deny", "upstream_ms": nil, "sampled": nil}},
		{"no_token", "GET", path, nil, 401,
			map[string]any{"route": "orders", "status": 401.0, "key": nil, "decision": nil, "upstream_ms": nil}},
		{"forged_token", "GET", path, bearer(forged), 401,
			map[string]any{"route": "orders", "status": 401.0, "key": nil, "decision": nil}},
		{"api_key_allowed", "GET", "/keyed/x", map[string]string{"X-API-Key": apiKey}, 200,
			map[string]any{"route": "keyed", "key": "header:X-Api-Key", "decision": "allow"}},
		{"api_key_denied", "GET", "/keyed/x", map[string]string{"X-API-Key": apiKey}, 429,
			map[string]any{"route": "keyed", "key": "header:X-Api-Key", "decision": "deny"}},
		{"by_ip_without_the_header", "GET", "/keyed/x", nil, 200,
			map[string]any{"route": "keyed", "key": "ip", "decision": "allow"}},
		{"unlimited_route", "GET", "/open", nil, 200,
			map[string]any{"route": "open", "key": nil, "decision": nil}},
		{"unmatched", "GET", "/nowhere/17", nil, 404,
			map[string]any{"route": "_unmatched", "status": 404.0, "decision": nil, "upstream_ms": nil}},
	}
	for i, s := range steps {
		if r := do(t, s.method, srv.URL+s.target, s.header); r.status != s.status {
			t.Fatalf("%s: status %d, want %d: %s", s.name, r.status, s.status, r.body)
		}
		rec := waitForRecords(t, &logs, accesslog.Message, i+1)[i]
		wantFields(t, s.name, rec, s.want)
		if _, ok := rec["duration_ms"].(float64); !ok {
			t.Errorf("%s: no duration_ms in %v", s.name, rec)
		}
		if _, proxied := rec["upstream_ms"].(float64); proxied != (s.status == 200) {
			t.Errorf("%s: upstream_ms present is %v, want %v (record %v)", s.name, proxied, s.status == 200, rec)
		}
	}

	auth := waitForRecords(t, &logs, "authentication failed", 2)
	wantFields(t, "missing token", auth[0], map[string]any{"api": "gateway", "route": "orders", "reason": "missing", "credential": "none", "remote": "127.0.0.1", "level": "WARN"})
	wantFields(t, "forged token", auth[1], map[string]any{"route": "orders", "reason": "signature", "credential": "bearer"})

	all := logs.String()
	for name, secret := range map[string]string{
		"token": token, "forged token": forged, "token signature": token[strings.LastIndexByte(token, '.')+1:],
		"API key": apiKey, "path": "/api/orders/17", "query": "4111111111111111", "subject": "user-7",
	} {
		if strings.Contains(all, secret) {
			t.Errorf("the log holds the %s:\n%s", name, all)
		}
	}
}

// TestGatewayAccessLogSamplesSuccesses: with sample 0 successful requests
// leave no record, while denials, refused tokens and upstream errors
// always do.
func TestGatewayAccessLogSamplesSuccesses(t *testing.T) {
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	var logs testenv.Buffer
	gw := loggedGateway(t, fmt.Sprintf(accessLogConfig+`  - {name: down, path_prefix: /down, upstream: "http://127.0.0.1:1"}
`, 0, up.URL), &logs, nil)
	token := sign(t, jwt.SigningMethodHS256, []byte(hsSecret), claims("user-7"), "")

	// ServeHTTP returns after the record is written: what is not there was
	// not logged.
	serve := func(target string, header map[string]string) int {
		req := httptest.NewRequest("GET", target, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		return rec.Code
	}
	for range 5 {
		if code := serve("/open", nil); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if got := testenv.Records(t, logs.String(), accesslog.Message); len(got) != 0 {
		t.Fatalf("successful requests logged at sample 0: %v", got)
	}
	for _, c := range []struct {
		target string
		header map[string]string
		status int
	}{
		{"/api/orders/1", bearer(token), 200},
		{"/api/orders/1", bearer(token), 429},
		{"/api/orders/1", bearer("not.a.jwt"), 401},
		{"/down/x", nil, 502},
	} {
		if code := serve(c.target, c.header); code != c.status {
			t.Fatalf("%s: status %d, want %d", c.target, code, c.status)
		}
	}
	got := testenv.Records(t, logs.String(), accesslog.Message)
	var statuses []float64
	for _, r := range got {
		statuses = append(statuses, r["status"].(float64))
	}
	if fmt.Sprint(statuses) != "[429 401 502]" {
		t.Fatalf("records of statuses %v, want [429 401 502]", statuses)
	}
	wantFields(t, "upstream down", got[2], map[string]any{"route": "down", "decision": nil})
	if _, ok := got[2]["upstream_ms"]; !ok {
		t.Errorf("the 502 has no upstream_ms: %v", got[2])
	}
}

// TestGatewayAccessLogOffByDefault: without access_log nothing is logged
// per request, but refused tokens still are.
func TestGatewayAccessLogOffByDefault(t *testing.T) {
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	var logs testenv.Buffer
	gw := loggedGateway(t, strings.Replace(fmt.Sprintf(accessLogConfig, 1, up.URL), "access_log: {enabled: true, sample: 1}", "", 1), &logs, nil)
	for _, target := range []string{"/open", "/nowhere", "/api/orders"} {
		gw.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", target, nil))
	}
	if got := testenv.Records(t, logs.String(), accesslog.Message); len(got) != 0 {
		t.Fatalf("access records without access_log: %v", got)
	}
	if got := testenv.Records(t, logs.String(), "authentication failed"); len(got) != 1 {
		t.Fatalf("%d records of refused tokens, want 1:\n%s", len(got), logs.String())
	}
}

// TestGatewayAccessLogTraceID: with tracing on, the record carries the
// request's trace ID, the caller's when it sent a traceparent.
func TestGatewayAccessLogTraceID(t *testing.T) {
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	var logs testenv.Buffer
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	gw := loggedGateway(t, fmt.Sprintf(accessLogConfig, 1, up.URL), &logs, tracing.New(provider))
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, target := range []string{"/open", "/api/orders"} {
		req := httptest.NewRequest("GET", target, nil)
		req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		gw.ServeHTTP(httptest.NewRecorder(), req)
	}
	access := testenv.Records(t, logs.String(), accesslog.Message)
	auth := testenv.Records(t, logs.String(), "authentication failed")
	if len(access) != 2 || len(auth) != 1 {
		t.Fatalf("%d access and %d auth records, want 2 and 1:\n%s", len(access), len(auth), logs.String())
	}
	for _, r := range append(access, auth...) {
		if r["trace_id"] != traceID {
			t.Errorf("trace_id = %v, want %s (record %v)", r["trace_id"], traceID, r)
		}
	}
}

// TestGatewayAuthFailuresLoggedThrottled: refused tokens are logged at most
// a burst per window; the first record of the next window says how many
// were left out.
func TestGatewayAuthFailuresLoggedThrottled(t *testing.T) {
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	var logs testenv.Buffer
	gw := loggedGateway(t, fmt.Sprintf(accessLogConfig, 1, up.URL), &logs, nil)
	now := time.Unix(1_800_000_000, 0)
	gateway.SetAuthLogClock(gw, func() time.Time { return now })
	refuse := func() {
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, httptest.NewRequest("GET", "/api/orders", nil))
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", rec.Code)
		}
	}
	const extra = 3
	for range accesslog.ThrottleBurst + extra {
		refuse()
	}
	if n := len(testenv.Records(t, logs.String(), "authentication failed")); n != accesslog.ThrottleBurst {
		t.Fatalf("%d records within one window, want the burst of %d", n, accesslog.ThrottleBurst)
	}
	now = now.Add(accesslog.ThrottleWindow)
	refuse()
	got := testenv.Records(t, logs.String(), "authentication failed")
	if len(got) != accesslog.ThrottleBurst+1 {
		t.Fatalf("%d records after the window passed, want %d", len(got), accesslog.ThrottleBurst+1)
	}
	if s := got[len(got)-1]["suppressed_before"]; s != float64(extra) {
		t.Errorf("suppressed_before = %v, want %d", s, extra)
	}
	// The access log is not throttled: every 401 has its record.
	if n := len(testenv.Records(t, logs.String(), accesslog.Message)); n != accesslog.ThrottleBurst+extra+1 {
		t.Errorf("%d access records, want one per request (%d)", n, accesslog.ThrottleBurst+extra+1)
	}
}

// TestGatewayAccessLogReloads: access_log is turned on and off by a reload.
func TestGatewayAccessLogReloads(t *testing.T) {
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	var logs testenv.Buffer
	on := fmt.Sprintf(accessLogConfig, 1, up.URL)
	off := strings.Replace(on, "enabled: true", "enabled: false", 1)
	gw := loggedGateway(t, off, &logs, nil)
	get := func() { gw.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/open", nil)) }
	for i, c := range []struct {
		yaml string
		want int
	}{{off, 0}, {on, 1}, {off, 1}} {
		cfg, err := gateway.ParseConfig([]byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if err := gw.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		get()
		if n := len(testenv.Records(t, logs.String(), accesslog.Message)); n != c.want {
			t.Fatalf("step %d: %d access records, want %d", i, n, c.want)
		}
	}
}

// TestCORSPreflightHeadersAsAnyClientWritesThem: a preflight naming its
// headers "Authorization, Content-Type" (capitals and a space, as curl and
// scripts write them) is granted like a browser's
// "authorization,content-type"; one asking for a header the policy does
// not allow is refused with a log line saying which header and which
// setting, never silently.
func TestCORSPreflightHeadersAsAnyClientWritesThem(t *testing.T) {
	up := newUpstream(t, "app")
	var logs testenv.Buffer
	gw := loggedGateway(t, fmt.Sprintf(`
cors: {allowed_origins: [https://app.example.com]}
routes: [{name: api, path_prefix: /api, upstream: %q}]
`, up.URL), &logs, nil)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	preflight := func(headers string) response {
		return do(t, "OPTIONS", srv.URL+"/api/x", map[string]string{"Origin": "https://app.example.com",
			"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": headers})
	}
	for _, h := range []string{"authorization,content-type", "Authorization, Content-Type", " content-type ,AUTHORIZATION"} {
		if r := preflight(h); r.status/100 != 2 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
			t.Errorf("preflight with %q: %d %v, want a grant", h, r.status, r.header)
		}
	}
	if strings.Contains(logs.String(), "CORS preflight refused") {
		t.Fatalf("a granted preflight was logged as refused:\n%s", logs.String())
	}
	if r := preflight("Authorization, X-Secret-Header"); r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a preflight for a header not allowed got a grant: %v", r.header)
	}
	recs := waitForRecords(t, &logs, "CORS preflight refused", 1)
	if got := recs[0]["reason"]; got != "headers x-secret-header not in cors.allowed_headers" {
		t.Errorf("refusal reason %q", got)
	}
	do(t, "OPTIONS", srv.URL+"/api/x", map[string]string{"Origin": "https://evil.example.com", "Access-Control-Request-Method": "GET"})
	recs = waitForRecords(t, &logs, "CORS preflight refused", 2)
	if got := recs[1]["reason"]; got != "origin not in cors.allowed_origins" {
		t.Errorf("refusal reason %q", got)
	}
}
