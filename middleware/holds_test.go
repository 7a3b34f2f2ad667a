package middleware_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/middleware"
)

func TestMiddlewareHoldsALeaseForTheHandlersRun(t *testing.T) {
	store := newMemory(t)
	mw := mustMiddleware(t, middleware.Options{Store: store, Name: "uploads",
		Limits: []sluice.Limit{sluice.Concurrency(1, time.Minute).Named("inflight")}})
	inside, release := make(chan struct{}), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") != "" {
			close(inside)
			<-release
		}
		w.Write([]byte("ok"))
	}))

	first := make(chan int)
	go func() {
		first <- get(h, func(r *http.Request) { r.URL.RawQuery = "wait=1" }).Code
	}()
	<-inside
	w := get(h, nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request while the first runs: %d, want 429", w.Code)
	}
	if p := w.Header().Get("RateLimit-Policy"); !strings.Contains(p, `qu="concurrent-requests"`) {
		t.Fatalf("RateLimit-Policy %q", p)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	// The first handler returned: its lease is free.
	if w := get(h, nil); w.Code != http.StatusOK {
		t.Fatalf("after the first returned: %d, want 200", w.Code)
	}
}

func TestMiddlewareReleasesTheLeaseOnPanic(t *testing.T) {
	store := newMemory(t)
	mw := mustMiddleware(t, middleware.Options{Store: store, Name: "jobs",
		Limits: []sluice.Limit{sluice.Concurrency(1, time.Minute).Named("inflight")}})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("panic") != "" {
			panic(http.ErrAbortHandler)
		}
		w.Write([]byte("ok"))
	}))
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want the handler's panic passed on", p)
			}
		}()
		get(h, func(r *http.Request) { r.URL.RawQuery = "panic=1" })
	}()
	if w := get(h, nil); w.Code != http.StatusOK {
		t.Fatalf("after a panicking handler: %d, want 200 (lease released)", w.Code)
	}
}

func TestMiddlewareSettlesWithTheResponseSize(t *testing.T) {
	store := newMemory(t)
	limits := []sluice.Limit{sluice.TokenBucket(10_000, 1e-3).Named("bytes")}
	mw := mustMiddleware(t, middleware.Options{Store: store, Name: "downloads", Limits: limits,
		Cost:    func(*http.Request) int64 { return 4096 }, // the most a response may be
		Reserve: true,
		Settle:  func(_ *http.Request, f middleware.Finished) int64 { return f.Bytes },
	})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 1000)))
	}))
	if w := get(h, nil); w.Code != http.StatusOK || w.Body.Len() != 1000 {
		t.Fatalf("download: %d, %d bytes", w.Code, w.Body.Len())
	}
	d, err := store.Check(context.Background(), sluice.Request{Rule: "downloads", Subject: "203.0.113.7", Limits: limits, Now: epoch})
	if err != nil || d.Remaining != 9000 {
		t.Fatalf("after a 1000-byte response reserved at 4096: %v %v, want 9000 remaining", d, err)
	}
}

func TestMiddlewareSettlesWithAReportedCost(t *testing.T) {
	store := newMemory(t)
	limits := []sluice.Limit{sluice.TokenBucket(1000, 1e-3).Named("tokens")}
	mw := mustMiddleware(t, middleware.Options{Store: store, Name: "llm", Limits: limits,
		Cost:    func(*http.Request) int64 { return 500 },
		Reserve: true,
		Settle: func(_ *http.Request, f middleware.Finished) int64 {
			if !f.HasReported {
				return 500
			}
			return f.Reported
		},
	})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		middleware.ReportCost(r.Context(), 120)
		w.Write([]byte("done"))
	}))
	get(h, nil)
	d, err := store.Check(context.Background(), sluice.Request{Rule: "llm", Subject: "203.0.113.7", Limits: limits, Now: epoch})
	if err != nil || d.Remaining != 880 {
		t.Fatalf("after reporting 120 of a 500 reservation: %v %v, want 880 remaining", d, err)
	}
}
