package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkCheckHandler measures POST /v1/check through the API's handler,
// without a network: key lookup, JSON in and out, route matching, the guard
// and the memory store, headers and metrics. The reference in the same run is
// GET /healthz through the same handler.
func BenchmarkCheckHandler(b *testing.B) {
	handler, secret := newAllocsAPI(b)

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
					// Errorf: FailNow must not be called off the
					// benchmark's goroutine.
					b.Errorf("status %d, want %d: %s", w.Code, wantStatus, w.Body)
					return
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
