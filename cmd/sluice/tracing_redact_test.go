package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// Planted in the requests of TestTracesCarryNoSecretsOrSubjects; no byte
// exported to the collector may hold one.
const (
	tracePlantedSecret  = "planted-secret-7d2a41c0"
	tracePlantedSubject = "planted-subject-bob@example.com"
	tracePlantedToken   = "planted-token-93be10aa"
)

// TestTracesCarryNoSecretsOrSubjects: with tracing on, sluice serve and
// sluice gateway export to a real OTLP receiver spans that name route
// patterns, never a raw path with a subject or a hold id, and URLs whose
// query values are REDACTED, on every face: checks with a query string,
// the subject peek and reset, a hold's settle, and the gateway's server
// and upstream spans (whose url.full keeps the upstream's path). Every exported body is searched, in its wire form
// and as JSON.
func TestTracesCarryNoSecretsOrSubjects(t *testing.T) {
	collector := startCollector(t)

	// The service: a check, a peek and a reset of a subject, a hold.
	const token = "trace-redact-admin-token-0123456789abcdef"
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"), AdminToken: token,
		StoreTimeout: time.Second, DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "error"}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := startService(ctx, cfg, io.Discard)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	serveStopped := false
	stopServe := func() {
		if !serveStopped {
			serveStopped = true
			cancel()
			<-svc.done
		}
	}
	t.Cleanup(stopServe)
	base := "http://" + svc.Addr
	call := func(method, path, secret, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := call("POST", "/v1/tenants", token, `{"name":"acme"}`); code != http.StatusCreated {
		t.Fatalf("create tenant: %d %s", code, b)
	}
	if code, b := call("PUT", "/v1/tenants/acme/rules/pay", token,
		`{"route":"/pay*","limits":[{"name":"m","algorithm":"token_bucket","capacity":100,"refill_per_second":10}]}`); code != http.StatusCreated {
		t.Fatalf("put rule: %d %s", code, b)
	}
	key := createKey(t, base, token, "acme")
	subjectPath := "/v1/tenants/acme/rules/pay/subjects/" + url.PathEscape(tracePlantedSubject)
	if code, b := call("POST", "/v1/check?api_key="+tracePlantedSecret, key, `{"route":"/pay","subject":"`+tracePlantedSubject+`"}`); code != http.StatusOK {
		t.Fatalf("check: %d %s", code, b)
	}
	code, b := call("POST", "/v1/check", key, `{"route":"/pay","subject":"`+tracePlantedSubject+`","cost":2,"reserve":true}`)
	var reserved struct{ Hold struct{ ID string } }
	if err := json.Unmarshal(b, &reserved); code != http.StatusOK || err != nil || reserved.Hold.ID == "" {
		t.Fatalf("reserve: %d %s", code, b)
	}
	if code, b := call("POST", "/v1/holds/"+reserved.Hold.ID+"/settle", key, `{"cost":1}`); code != http.StatusOK {
		t.Fatalf("settle: %d %s", code, b)
	}
	if code, b := call("GET", subjectPath+"?token="+tracePlantedToken, token, ""); code != http.StatusOK {
		t.Fatalf("peek: %d %s", code, b)
	}
	if code, b := call("DELETE", subjectPath, token, ""); code != http.StatusNoContent {
		t.Fatalf("reset: %d %s", code, b)
	}

	// The gateway: a query string to its listener, passed on upstream.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gwPath := filepath.Join(t.TempDir(), "gateway.yaml")
	gwConfig := fmt.Sprintf(`listen: %q
admin_listen: "127.0.0.1:0"
routes:
  - {name: users, path_prefix: /users, upstream: %q, key: {header: X-API-Key}, limits: [{name: m, algorithm: fixed_window, limit: 100, window: 1m}]}
`, addr, up.URL)
	if err := os.WriteFile(gwPath, []byte(gwConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := newLogger(io.Discard, "error")
	if err != nil {
		t.Fatal(err)
	}
	gwCtx, gwCancel := context.WithCancel(context.Background())
	gwDone := make(chan error, 1)
	go func() {
		gwDone <- runGateway(gwCtx, gatewayFlags{Config: gwPath, ShutdownTimeout: 5 * time.Second}, log, nil, nil)
	}()
	// The upstream span keeps the upstream's path, as the conventions say
	// url.full does (the gateway's own server span drops it): only the
	// query is the client's secret here.
	gatewayPath := "/users/orders?token=" + tracePlantedToken + "&api_key=" + tracePlantedSecret
	testenv.Eventually(t, 10*time.Second, "the gateway answers", func() bool {
		req, _ := http.NewRequest("GET", "http://"+addr+gatewayPath, nil)
		req.Header.Set("X-API-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// Both processes' spans exported: each flushes what it holds as it stops.
	collector.await(t, "gateway upstream", func(s *tracepb.Span) bool { return strings.Contains(attr(s.Attributes, "url.full"), "/orders") })
	collector.await(t, "subject reset", func(s *tracepb.Span) bool {
		return s.Name == "DELETE /v1/tenants/{tenant}/rules/{name}/subjects/{subject...}"
	})
	gwCancel()
	if err := <-gwDone; err != nil {
		t.Errorf("runGateway: %v", err)
	}
	stopServe()

	collector.mu.Lock()
	defer collector.mu.Unlock()
	if len(collector.requests) == 0 {
		t.Fatal("the collector received no export")
	}
	for i, req := range collector.requests {
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		asJSON := protojson.Format(req)
		for _, planted := range []string{tracePlantedSecret, tracePlantedToken, tracePlantedSubject, url.PathEscape(tracePlantedSubject), "bob", reserved.Hold.ID} {
			if bytes.Contains(wire, []byte(planted)) || strings.Contains(asJSON, planted) {
				t.Errorf("export %d carries %q:\n%s", i, planted, asJSON)
			}
		}
	}
	// And what they do carry: route patterns and the query's names.
	var routed, redactedQuery bool
	for _, s := range collector.spans {
		routed = routed || attr(s.Attributes, "http.route") == "/v1/tenants/{tenant}/rules/{name}/subjects/{subject...}" &&
			attr(s.Attributes, "url.path") == "/v1/tenants/{tenant}/rules/{name}/subjects/{subject...}"
		redactedQuery = redactedQuery || strings.HasSuffix(attr(s.Attributes, "url.full"), "/orders?token=REDACTED&api_key=REDACTED")
	}
	if !routed || !redactedQuery {
		t.Errorf("a subject span with its route as http.route and url.path: %v; the upstream URL with its query REDACTED: %v", routed, redactedQuery)
	}
}
