package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicelabs/sluice/tracing"
)

// Planted in requests; no exported span may carry them.
const (
	plantedSecret  = "planted-secret-4f1c9e"
	plantedSubject = "planted-subject-alice@example.com"
)

// TestServerAndClientSpansAreRedacted: a server span through a ServeMux
// names its route pattern, never the raw path with a subject, and a client
// span's url.full keeps the query's names with their values REDACTED;
// an upstream error quoting the URL loses its query too.
func TestServerAndClientSpansAreRedacted(t *testing.T) {
	exported := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracing.Redacting(exported)))
	tr := tracing.New(provider)

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	client := &http.Client{Transport: tr.Transport(http.DefaultTransport)}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants/{tenant}/rules/{rule}/subjects/{subject}", func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", upstream.URL+"/orders?api_key="+plantedSecret+"&page=2", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		// A refused connection: the error quotes the URL with its query.
		req, _ = http.NewRequestWithContext(r.Context(), "GET", "http://127.0.0.1:1/x?token="+plantedSecret, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	srv := httptest.NewServer(tr.Handler(mux, "test"))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/tenants/acme/rules/pay/subjects/" + plantedSubject + "?token=" + plantedSecret)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := provider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans := exported.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans exported, want 3 (server, two clients)", len(spans))
	}
	var sawRoute, sawClientURL bool
	for _, s := range spans {
		dump := fmt.Sprintf("%s %v %v %v", s.Name, s.Attributes, s.Status, s.Events)
		if strings.Contains(dump, plantedSecret) || strings.Contains(dump, "alice") {
			t.Errorf("span %q carries a planted secret or subject:\n%s", s.Name, dump)
		}
		for _, kv := range s.Attributes {
			switch {
			case kv.Key == "http.route":
				sawRoute = true
				if got, want := kv.Value.AsString(), "/v1/tenants/{tenant}/rules/{rule}/subjects/{subject}"; got != want {
					t.Errorf("http.route %q, want %q", got, want)
				}
				if !hasAttr(s.Attributes, "url.path", "/v1/tenants/{tenant}/rules/{rule}/subjects/{subject}") {
					t.Errorf("server span's url.path is not its route: %v", s.Attributes)
				}
			case kv.Key == "url.full" && strings.Contains(kv.Value.AsString(), "/orders"):
				sawClientURL = true
				if got, want := kv.Value.AsString(), upstream.URL+"/orders?api_key=REDACTED&page=REDACTED"; got != want {
					t.Errorf("client url.full %q, want %q", got, want)
				}
			}
		}
	}
	if !sawRoute || !sawClientURL {
		t.Errorf("route recorded %v, client URL recorded %v; want both: %v", sawRoute, sawClientURL, spans)
	}
}

// TestUnroutedServerSpanDropsThePath: a request no pattern matched keeps
// no path at all (it may be anything a client sent).
func TestUnroutedServerSpanDropsThePath(t *testing.T) {
	exported := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracing.Redacting(exported)))
	tr := tracing.New(provider)
	srv := httptest.NewServer(tr.Handler(http.NotFoundHandler(), "test"))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/users/" + plantedSubject)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	spans := exported.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	for _, kv := range spans[0].Attributes {
		if kv.Key == "url.path" || kv.Key == "http.target" {
			t.Errorf("unrouted span keeps %s = %q", kv.Key, kv.Value.AsString())
		}
	}
}

// TestRedactingKeepsEverythingElse: attributes other than URLs, the name,
// the kind and the trace ids pass unchanged, and an error without a URL
// keeps its text.
func TestRedactingKeepsEverythingElse(t *testing.T) {
	exported := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracing.Redacting(exported)))
	_, span := provider.Tracer("t").Start(context.Background(), "work")
	span.SetAttributes(attribute.String("sluice.rule", "pay"), attribute.Int("sluice.cost", 3))
	span.RecordError(errors.New("store deadline exceeded"))
	span.End()
	got := exported.GetSpans()
	if len(got) != 1 {
		t.Fatalf("%d spans, want 1", len(got))
	}
	s := got[0]
	if s.Name != "work" || !hasAttr(s.Attributes, "sluice.rule", "pay") || len(s.Attributes) != 2 {
		t.Errorf("span changed: %+v", s)
	}
	if len(s.Events) != 1 || !hasAttr(s.Events[0].Attributes, "exception.message", "store deadline exceeded") {
		t.Errorf("error event changed: %+v", s.Events)
	}
}

func hasAttr(kvs []attribute.KeyValue, key, value string) bool {
	for _, kv := range kvs {
		if string(kv.Key) == key && kv.Value.String() == value {
			return true
		}
	}
	return false
}
