package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// Allocation budgets of one check through the handler, not counting what
// net/http allocates for the request before the handler runs.
const (
	allocBudgetAllowed = 10
	allocBudgetDenied  = 10
)

// handlerCall is one reusable request to the handler: the request and the
// response writer are made once, so only the handler's own allocations count.
type handlerCall struct {
	req  *http.Request
	body *bytes.Reader
	raw  []byte
	w    *statusProbe
}

func newHandlerCall(secret, body string) *handlerCall {
	c := &handlerCall{raw: []byte(body), w: &statusProbe{header: http.Header{}}}
	c.body = bytes.NewReader(c.raw)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/check", io.NopCloser(c.body))
	req.Header.Set("X-API-Key", secret)
	c.req = req
	return c
}

func (c *handlerCall) serve(h http.Handler) int {
	c.body.Reset(c.raw)
	clear(c.w.header)
	c.w.status = 0
	h.ServeHTTP(c.w, c.req)
	return c.w.status
}

// newAllocsAPI is the check handler over a memory store with metrics, with a
// rule that always allows (/open*) and one that allows once a day (/spent*).
func newAllocsAPI(tb testing.TB) (http.Handler, string) {
	catalog, secret := catalogtest.SQLiteTenant(tb,
		sluice.Rule{Tenant: "acme", Name: "open", Route: "/open*", FailureMode: sluice.FailClosed,
			Limits: []sluice.Limit{sluice.TokenBucket(1e9, 1e9).Named("burst"), sluice.SlidingWindow(1e9, time.Minute).Named("minute")}},
		sluice.Rule{Tenant: "acme", Name: "spent", Route: "/spent*", FailureMode: sluice.FailClosed,
			Limits: []sluice.Limit{sluice.FixedWindow(1, 24*time.Hour).Named("day")}})
	store := memory.New(memory.Options{})
	tb.Cleanup(func() { store.Close() })
	m := metrics.New(prometheus.NewRegistry())
	engine := check.New(store, check.Options{Metrics: m})
	tb.Cleanup(func() { engine.Close() })
	api, err := New(context.Background(), Options{Catalog: catalog, Engine: engine, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	// Not Handler: the OpenAPI validation it adds in tests would be
	// measured too.
	return api.handler(), secret
}

// TestCheckHandlerAllocationBudget holds the check handler to its allocation
// budget: allocations, unlike timings, are the same on any machine.
func TestCheckHandlerAllocationBudget(t *testing.T) {
	h, secret := newAllocsAPI(t)
	for _, c := range []struct {
		name   string
		body   string
		status int
		budget float64
	}{
		{"allowed", `{"route":"/open/x","subject":"user-42"}`, http.StatusOK, allocBudgetAllowed},
		{"denied_by_the_deny_cache", `{"route":"/spent/x","subject":"user-42"}`, http.StatusTooManyRequests, allocBudgetDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			call := newHandlerCall(secret, c.body)
			call.serve(h) // the first spends /spent's only unit
			if got := call.serve(h); got != c.status {
				t.Fatalf("status %d, want %d", got, c.status)
			}
			allocs := testing.AllocsPerRun(200, func() { call.serve(h) })
			t.Logf("%.0f allocations per check (budget %.0f)", allocs, c.budget)
			if allocs > c.budget {
				t.Errorf("%.0f allocations per check, over the budget of %.0f", allocs, c.budget)
			}
		})
	}
}

// BenchmarkCheckHandlerOnly measures the handler alone (see
// TestCheckHandlerAllocationBudget); BenchmarkCheckHandler adds what
// httptest allocates per request.
func BenchmarkCheckHandlerOnly(b *testing.B) {
	h, secret := newAllocsAPI(b)
	for _, c := range []struct{ name, body string }{
		{"allowed", `{"route":"/open/x","subject":"user-42"}`},
		{"denied-deny-cache", `{"route":"/spent/x","subject":"user-42"}`},
		{"no-rule", `{"route":"/elsewhere","subject":"user-42"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			call := newHandlerCall(secret, c.body)
			call.serve(h)
			b.ReportAllocs()
			for b.Loop() {
				call.serve(h)
			}
		})
	}
}
