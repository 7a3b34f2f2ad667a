package httpapi

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// BenchmarkCheckHandlerResolution measures POST /v1/check through the
// handler alone (as BenchmarkCheckHandlerOnly) for the same limits reached
// three ways, side by side in one run: a plain rule, a plan of a rule with
// plans and overrides (the subject matching none), and an override on top
// of that plan. The goal: the last two within 5% of the first.
func BenchmarkCheckHandlerResolution(b *testing.B) {
	limits := []sluice.Limit{sluice.TokenBucket(1e9, 1e9).Named("burst"), sluice.SlidingWindow(1e9, time.Minute).Named("minute")}
	tiered := sluice.Rule{Tenant: "acme", Name: "tiered", Route: "/tiered*", FailureMode: sluice.FailClosed,
		Limits: []sluice.Limit{sluice.SlidingWindow(10, time.Minute).Named("minute")},
		Plans:  sluice.Plans{"free": {sluice.SlidingWindow(10, time.Minute).Named("minute")}, "pro": limits}}
	catalog, secret := catalogtest.SQLiteTenant(b,
		sluice.Rule{Tenant: "acme", Name: "plain", Route: "/plain*", FailureMode: sluice.FailClosed, Limits: limits}, tiered)
	ctx := context.Background()
	for _, o := range []sluice.Override{
		{Tenant: "acme", Rule: "tiered", Name: "one", Subjects: []string{"cust-1"}, Limits: limits},
		{Tenant: "acme", Rule: "tiered", Name: "vips", Subjects: []string{"vip-*"}, Limits: limits},
	} {
		if _, err := catalog.PutOverride(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	store := memory.New(memory.Options{})
	b.Cleanup(func() { store.Close() })
	m := metrics.New(prometheus.NewRegistry())
	engine := check.New(store, check.Options{Metrics: m})
	b.Cleanup(func() { engine.Close() })
	api, err := New(ctx, Options{Catalog: catalog, Engine: engine, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	h := api.handler()
	for _, c := range []struct{ name, body string }{
		{"plain", `{"route":"/plain/x","subject":"user-42"}`},
		{"plan", `{"route":"/tiered/x","subject":"user-42","plan":"pro"}`},
		{"override", `{"route":"/tiered/x","subject":"vip-7","plan":"pro"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			call := newHandlerCall(secret, c.body)
			if status := call.serve(h); status != 200 {
				b.Fatalf("status %d", status)
			}
			b.ReportAllocs()
			for b.Loop() {
				call.serve(h)
			}
		})
	}
}
