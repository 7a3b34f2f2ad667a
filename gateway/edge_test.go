package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/tracing"
)

// TestGatewayLimitKeys: a route's limits count by the verified claim or the
// API-key header it names, and by client IP when the request lacks it.
func TestGatewayLimitKeys(t *testing.T) {
	gw := startVerifyingGateway(t, `
  - name: by-tenant
    path_prefix: /tenant
    upstream: %[1]s
    auth: main
    key: {claim: tenant_id}
    limits: [{name: hour, algorithm: fixed_window, limit: 1, window: 1h}]
  - name: by-api-key
    path_prefix: /keyed
    upstream: %[1]s
    key: {header: X-API-Key}
    limits: [{name: hour, algorithm: fixed_window, limit: 1, window: 1h}]
`)
	token := func(sub string, tenant any) map[string]string {
		c := claims(sub)
		if tenant != nil {
			c["tenant_id"] = tenant
		}
		return bearer(sign(t, jwt.SigningMethodHS256, []byte(hsSecret), c, ""))
	}
	apiKey := func(k string) map[string]string { return map[string]string{"X-API-Key": k} }

	t.Run("claim", func(t *testing.T) {
		runSteps(t, gw.URL+"/tenant", []step{
			{"first_user_of_tenant_a", token("alice", "a"), 200},
			{"other_user_same_tenant_shares_its_quota", token("bob", "a"), 429},
			{"numeric_tenant_is_its_own", token("alice", 7), 200},
			{"tenant_b_is_its_own", token("carol", "b"), 200},
			{"no_claim_counts_by_ip", token("dave", nil), 200},
			{"no_claim_again_same_ip", token("erin", nil), 429},
		})
	})
	t.Run("header", func(t *testing.T) {
		runSteps(t, gw.URL+"/keyed", []step{
			{"key_one", apiKey("k1"), 200},
			{"key_one_again", apiKey("k1"), 429},
			{"key_two_is_its_own", apiKey("k2"), 200},
			{"no_key_counts_by_ip", nil, 200},
			{"no_key_again", nil, 429},
		})
	})
}

// startVerifyingGateway serves routes (YAML list items; %[1]s is an echoing
// upstream's URL) with an HS256 verifier "main" for the test tokens.
func startVerifyingGateway(t *testing.T, routes string) *httptest.Server {
	t.Helper()
	keys(t)
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	_, gw := startGateway(t, fmt.Sprintf(`
jwt:
  main: {hs256_secret_env: GW_TEST_SECRET, issuer: https://issuer.test, audience: [sluice-api]}
routes:`+routes, up.URL))
	return gw
}

// step is one request of a sequence and the status it must get.
type step struct {
	name   string
	header map[string]string
	want   int
}

// runSteps sends GET url with each step's headers, in order.
func runSteps(t *testing.T, url string, steps []step) {
	t.Helper()
	for _, s := range steps {
		if got := do(t, "GET", url, s.header).status; got != s.want {
			t.Fatalf("%s: %d, want %d", s.name, got, s.want)
		}
	}
}

// TestGatewayClaimHeaders: verified claims reach the upstream in the
// configured headers; copies the client sent never do, with or without a
// token.
func TestGatewayClaimHeaders(t *testing.T) {
	gw := startVerifyingGateway(t, `
  - name: api
    path_prefix: /api
    upstream: %[1]s
    auth: main
    auth_optional: true
    claim_headers: {sub: X-User-Id, plan: X-Plan, roles: X-Roles, tier: X-Tier, org: x-org}
`)
	c := claims("alice")
	c["plan"] = "gold"
	c["roles"] = []any{"admin", "billing"}
	c["tier"] = 3
	c["org"] = map[string]any{"id": "o1"} // an object: not sent
	forged := map[string]string{"X-User-Id": "root", "X-Plan": "platinum", "X-Org": "evil", "X-Tier": "9"}

	withToken := bearer(sign(t, jwt.SigningMethodHS256, []byte(hsSecret), c, ""))
	for k, v := range forged {
		withToken[k] = v
	}
	r := do(t, "GET", gw.URL+"/api", withToken)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	for header, want := range map[string][]string{
		"X-User-Id": {"alice"}, "X-Plan": {"gold"}, "X-Roles": {"admin,billing"}, "X-Tier": {"3"}, "X-Org": nil,
	} {
		if got := r.echo.Header[header]; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("with a token, upstream saw %s %q, want %q", header, got, want)
		}
	}

	r = do(t, "GET", gw.URL+"/api", forged)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	for header := range forged {
		if got, ok := r.echo.Header[header]; ok {
			t.Errorf("without a token, upstream saw the client's %s %q", header, got)
		}
	}
}

// TestGatewayTracing: a request's span joins the caller's trace, is named
// after its route, has the check's span under it, and the trace context goes
// on to the upstream.
func TestGatewayTracing(t *testing.T) {
	up := newUpstream(t, "app")
	cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf(`
routes:
  - {name: api, path_prefix: /api, upstream: %q, limits: [{name: m, algorithm: fixed_window, limit: 5, window: 1m}]}
`, up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	reg := prometheus.NewRegistry()
	gw, err := gateway.New(cfg, gateway.Options{Store: storeOf(t, cfg), Metrics: metrics.New(reg), Gatherer: reg, Tracing: tracing.New(provider)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(func() { srv.Close(); gw.Close() })

	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := do(t, "GET", srv.URL+"/api/x", map[string]string{"Traceparent": "00-" + traceID + "-" + callerSpan + "-01"})
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	upstreamParent := r.echo.Header.Get("Traceparent")
	parts := strings.Split(upstreamParent, "-")
	if len(parts) != 4 || parts[1] != traceID || parts[2] == callerSpan {
		t.Fatalf("upstream got traceparent %q, want trace %s with the gateway's own span as parent", upstreamParent, traceID)
	}

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range recorder.Ended() {
		byName[s.Name()] = s
	}
	server, ok := byName["GET /api"]
	if !ok {
		t.Fatalf("no server span named after the route; spans: %v", names(recorder.Ended()))
	}
	if server.SpanContext().TraceID().String() != traceID || server.Parent().SpanID().String() != callerSpan {
		t.Errorf("the server span is not a child of the caller's span")
	}
	check, ok := byName["sluice.check"]
	if !ok || check.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Errorf("no check span under the server span; spans: %v", names(recorder.Ended()))
	}
	var client sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.SpanKind().String() == "client" {
			client = s
		}
	}
	if client == nil || client.SpanContext().SpanID().String() != parts[2] {
		t.Errorf("the upstream's parent span %s is not the gateway's client span", parts[2])
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}
