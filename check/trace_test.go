package check_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
)

// spanAttrs returns a span's attributes as strings, by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// TestCheckSpans: with a tracer provider, every check is one span, child of
// the caller's, saying tenant, rule, decision, whether the store was called
// (and for how long) and whether the deny cache answered.
func TestCheckSpans(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	e := check.New(newMemory(t), check.Options{TracerProvider: provider})
	t.Cleanup(func() { e.Close() })
	rule := e.NewRule(metrics.Labels{Source: "test", Tenant: "acme", Rule: "orders"},
		check.Rule{Namespace: "t1", Name: "orders", Limits: hourly(1)})

	ctx, parent := provider.Tracer("test").Start(context.Background(), "caller")
	for range 3 {
		if _, err := e.Check(ctx, check.Query{Rule: rule, Subject: "s", Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	parent.End()

	var checks []sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.Name() == "sluice.check" {
			checks = append(checks, s)
		}
	}
	if len(checks) != 3 {
		t.Fatalf("%d check spans, want 3", len(checks))
	}
	want := []struct{ decision, cacheHit, storeCalled string }{
		{"allowed", "false", "true"},
		{"denied", "false", "true"},
		{"denied", "true", "false"}, // the deny cache answers without the store
	}
	for i, s := range checks {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("check %d: span is not a child of the caller's span", i)
		}
		a := spanAttrs(s)
		if a["sluice.tenant"] != "acme" || a["sluice.rule"] != "orders" || a["sluice.cost"] != "1" {
			t.Errorf("check %d: attributes %v, want tenant acme, rule orders, cost 1", i, a)
		}
		if a["sluice.decision"] != want[i].decision || a["sluice.deny_cache_hit"] != want[i].cacheHit || a["sluice.store.called"] != want[i].storeCalled {
			t.Errorf("check %d: decision %s, deny cache hit %s, store called %s; want %+v",
				i, a["sluice.decision"], a["sluice.deny_cache_hit"], a["sluice.store.called"], want[i])
		}
		_, timed := a["sluice.store.duration_ms"]
		if timed != (want[i].storeCalled == "true") {
			t.Errorf("check %d: store duration recorded %v, want it exactly when the store was called", i, timed)
		}
	}
}

// BenchmarkCheckTracing compares a store check with tracing off and on
// (spans recorded by the SDK, exported nowhere).
func BenchmarkCheckTracing(b *testing.B) {
	for _, tc := range []struct {
		name     string
		provider *sdktrace.TracerProvider
	}{
		{"off", nil},
		{"on", sdktrace.NewTracerProvider()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			opts := check.Options{}
			if tc.provider != nil {
				opts.TracerProvider = tc.provider
			}
			e := check.New(newMemory(b), opts)
			b.Cleanup(func() { e.Close() })
			rule := e.NewRule(metrics.Labels{Source: "bench", Tenant: "acme", Rule: "orders"},
				check.Rule{Namespace: "t1", Name: "orders", Limits: hourly(1 << 40)})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Check(ctx, check.Query{Rule: rule, Subject: "s", Cost: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
