package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/middleware"
)

// countCalls counts the requests a handler serves.
func countCalls(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	})
}

// TestRemoteModeLeases: with RemoteLease, remote mode admits exactly the
// service's limit from leased units, with a service call per lease rather
// than per request, and gives the unused units back on Close.
func TestRemoteModeLeases(t *testing.T) {
	l := sluice.FixedWindow(100, time.Hour).Named("hour")
	l.Lease = sluice.LeaseAuto
	h, secret := serviceHandler(t, sluice.Rule{Tenant: "acme", Name: "hot", Route: "/api/hot*", Limits: []sluice.Limit{l}, FailureMode: sluice.FailClosed})
	var calls atomic.Int64
	srv := httptest.NewServer(countCalls(h, &calls))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, secret)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := middleware.NewLimiter(middleware.Options{Client: c, Key: middleware.Header("X-User"),
		Route:       func(*http.Request) string { return "/api/hot" },
		RemoteLease: &client.LeaseOptions{Want: 10, TTL: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	app := &served{}
	handler := lim.Handler(app)
	var ok, denied atomic.Int64
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			for range 5 {
				w := get(handler, func(r *http.Request) { r.URL.Path = "/api/hot/1"; r.Header.Set("X-User", "alice") })
				switch w.Code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				default:
					t.Errorf("status %d %s", w.Code, w.Body)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 100 || denied.Load() != 50 || app.n.Load() != 100 {
		t.Fatalf("%d allowed (%d served), %d denied: want exactly 100 of 150", ok.Load(), app.n.Load(), denied.Load())
	}
	// Each lease call stands for up to 10 admits; every deny is a call.
	if leaseCalls := calls.Load() - denied.Load(); leaseCalls > 20 {
		t.Errorf("%d service calls for 100 admits, want about one per 10", leaseCalls)
	}

	// Bob takes a lease of 10 and uses 2; Close gives 8 back.
	for range 2 {
		if w := get(handler, func(r *http.Request) { r.URL.Path = "/api/hot/2"; r.Header.Set("X-User", "bob") }); w.Code != 200 {
			t.Fatalf("bob: %d", w.Code)
		}
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := c.Check(context.Background(), "/api/hot", "bob", 0)
	if err != nil || res.Remaining != 98 {
		t.Fatalf("bob after Close: %+v %v, want 98 left", res, err)
	}
}

// TestRemoteModeLeaseOfARuleThatDoesNotLease: requests are checked
// directly, as without RemoteLease.
func TestRemoteModeLeaseOfARuleThatDoesNotLease(t *testing.T) {
	srv, secret := serviceWithRule(t) // 2 a minute, no lease
	c, _ := client.New(srv.URL, secret)
	app := &served{}
	h := mustMiddleware(t, middleware.Options{Client: c, Key: middleware.Header("X-User"), RemoteLease: &client.LeaseOptions{Want: 5}})(app)
	for i, want := range []int{200, 200, 429, 429} {
		if w := get(h, func(r *http.Request) { r.URL.Path = "/api/orders/1"; r.Header.Set("X-User", "alice") }); w.Code != want {
			t.Fatalf("request %d: %d, want %d (%s)", i, w.Code, want, w.Body)
		}
	}
}

// TestRemoteModeLeaseServiceDown: with the service gone, remote mode admits
// exactly the units it holds, then the failure mode answers (closed: 503),
// never an admit the service did not grant.
func TestRemoteModeLeaseServiceDown(t *testing.T) {
	l := sluice.FixedWindow(100, time.Hour).Named("hour")
	l.Lease = sluice.LeaseAuto
	h, secret := serviceHandler(t, sluice.Rule{Tenant: "acme", Name: "hot", Route: "/api/hot*", Limits: []sluice.Limit{l}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, _ := client.New(srv.URL, secret)
	app := &served{}
	handler := mustMiddleware(t, middleware.Options{Client: c, Key: middleware.Header("X-User"), FailureMode: sluice.FailClosed,
		RemoteLease: &client.LeaseOptions{Want: 5, TTL: 30 * time.Second}})(app)
	req := func() int {
		return get(handler, func(r *http.Request) { r.URL.Path = "/api/hot"; r.Header.Set("X-User", "alice") }).Code
	}
	if code := req(); code != http.StatusOK {
		t.Fatalf("first: %d", code)
	}
	srv.Close()
	for i := range 4 {
		if code := req(); code != http.StatusOK {
			t.Fatalf("admit %d of the 4 held: %d", i, code)
		}
	}
	for i := range 3 {
		if code := req(); code != http.StatusServiceUnavailable {
			t.Fatalf("request %d past the lease with the service down: %d, want 503 (fails closed)", i, code)
		}
	}
	if app.n.Load() != 5 {
		t.Fatalf("%d served, want the 5 leased", app.n.Load())
	}
}
