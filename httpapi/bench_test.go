package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// BenchmarkCheckHandler measures POST /v1/check through the API's handler,
// without a network: key lookup, JSON in and out, route matching, the guard
// and the memory store, headers and metrics. The reference in the same run is
// GET /healthz through the same handler.
func BenchmarkCheckHandler(b *testing.B) {
	ctx := context.Background()
	catalog, secret := catalogtest.SQLiteTenant(b,
		sluice.Rule{Tenant: "acme", Name: "open", Route: "/open*", FailureMode: sluice.FailClosed,
			Limits: []sluice.Limit{sluice.TokenBucket(1e9, 1e9).Named("burst"), sluice.SlidingWindow(1e9, time.Minute).Named("minute")}},
		sluice.Rule{Tenant: "acme", Name: "spent", Route: "/spent*", FailureMode: sluice.FailClosed,
			Limits: []sluice.Limit{sluice.FixedWindow(1, 24*time.Hour).Named("day")}})
	store := memory.New(memory.Options{})
	defer store.Close()
	m := metrics.New(prometheus.NewRegistry())
	engine := check.New(store, check.Options{Metrics: m})
	defer engine.Close()
	api, err := New(ctx, Options{Catalog: catalog, Engine: engine, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	handler := api.Handler()

	subjects := make([]string, 10_000)
	for i := range subjects {
		subjects[i] = strconv.Itoa(i)
	}
	run := func(b *testing.B, wantStatus int, request func(i int64) *http.Request) {
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w := httptest.NewRecorder()
				handler.ServeHTTP(w, request(n.Add(1)))
				if w.Code != wantStatus {
					b.Fatalf("status %d, want %d: %s", w.Code, wantStatus, w.Body)
				}
			}
		})
	}
	check := func(route, subject string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"route":"`+route+`","subject":"`+subject+`"}`))
		r.Header.Set("X-API-Key", secret)
		return r
	}
	b.Run("allowed/spread", func(b *testing.B) {
		run(b, http.StatusOK, func(i int64) *http.Request { return check("/open/x", subjects[i%int64(len(subjects))]) })
	})
	// The first check spends the day's only unit; every later one is a deny,
	// answered by the local deny cache without a store call.
	handler.ServeHTTP(httptest.NewRecorder(), check("/spent/x", "hot"))
	b.Run("denied/deny-cache", func(b *testing.B) {
		run(b, http.StatusTooManyRequests, func(int64) *http.Request { return check("/spent/x", "hot") })
	})
	b.Run("no-rule", func(b *testing.B) {
		run(b, http.StatusOK, func(int64) *http.Request { return check("/elsewhere", "x") })
	})
	b.Run("reference-healthz", func(b *testing.B) {
		run(b, http.StatusOK, func(int64) *http.Request { return httptest.NewRequest(http.MethodGet, "/healthz", nil) })
	})
}
