package middleware_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/middleware"
)

// serviceWith runs the real check API with one tenant, one check key and
// rule.
func serviceWith(t *testing.T, rule sluice.Rule) (*httptest.Server, string) {
	t.Helper()
	h, secret := serviceHandler(t, rule)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, secret
}

// serviceHandler is the real check API with one tenant, one check key and
// rule, for a test to serve as it likes.
func serviceHandler(t *testing.T, rule sluice.Rule) (http.Handler, string) {
	t.Helper()
	catalog, secret := catalogtest.SQLiteTenant(t, rule)
	g := check.New(newMemory(t), check.Options{})
	t.Cleanup(func() { g.Close() })
	api, err := httpapi.New(context.Background(), httpapi.Options{Catalog: catalog, Engine: g, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return api.Handler(), secret
}

// serviceWithRule runs the real check API with one tenant, one check key and
// a rule of 2 per minute on /api/orders*.
func serviceWithRule(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	return serviceWith(t, sluice.Rule{Tenant: "acme", Name: "orders", Route: "/api/orders*",
		Limits: []sluice.Limit{sluice.FixedWindow(2, time.Minute).Named("minute")}, FailureMode: sluice.FailClosed})
}

// TestRemoteDecisionKeepsEveryFigure: the decision a remote service took
// reaches the DenyHandler whole: each limit's verdict and figures, and the
// limit that binds.
func TestRemoteDecisionKeepsEveryFigure(t *testing.T) {
	srv, secret := serviceWith(t, sluice.Rule{Tenant: "acme", Name: "orders", Route: "/api/orders*", FailureMode: sluice.FailClosed,
		Limits: []sluice.Limit{sluice.TokenBucket(10, 1).Named("burst"), sluice.FixedWindow(1, time.Hour).Named("hourly")}})
	c, err := client.New(srv.URL, secret)
	if err != nil {
		t.Fatal(err)
	}
	var denied *sluice.Decision
	h := mustMiddleware(t, middleware.Options{Client: c, Key: middleware.Header("X-User"),
		DenyHandler: func(w http.ResponseWriter, r *http.Request, d sluice.Decision) {
			denied = &d
			w.WriteHeader(http.StatusTooManyRequests)
		}})(&served{})
	for i, want := range []int{200, 429} {
		w := get(h, func(r *http.Request) { r.URL.Path = "/api/orders/1"; r.Header.Set("X-User", "alice") })
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
	}
	if denied == nil {
		t.Fatal("the DenyHandler was not called")
	}
	d := *denied
	if d.Allowed || len(d.Limits) != 2 || d.Binding != 1 {
		t.Fatalf("decision %+v: want denied by the second of two limits", d)
	}
	burst, hourly := d.Limits[0], d.Limits[1]
	if !burst.Allowed || burst.Name != "burst" || burst.Algorithm != sluice.AlgorithmTokenBucket || burst.Limit != 10 || burst.Remaining != 9 {
		t.Errorf("burst %+v: want allowed, 9 of 10 left (the deny consumed nothing)", burst)
	}
	if hourly.Allowed || hourly.Name != "hourly" || hourly.Limit != 1 || hourly.Remaining != 0 || hourly.RetryAfter <= 0 || hourly.RetryAfter > time.Hour {
		t.Errorf("hourly %+v: want denied, 0 of 1 left, a wait within the hour", hourly)
	}
	if d.RetryAfter != hourly.RetryAfter || d.Limit != 1 {
		t.Errorf("top-level figures %+v are not the binding limit's", d)
	}
}

func TestMiddlewareWithRemoteService(t *testing.T) {
	srv, secret := serviceWithRule(t)
	c, err := client.New(srv.URL, secret)
	if err != nil {
		t.Fatal(err)
	}
	app := &served{}
	h := mustMiddleware(t, middleware.Options{Client: c, Key: middleware.Header("X-User")})(app)
	req := func(path, user string) *httptest.ResponseRecorder {
		return get(h, func(r *http.Request) { r.URL.Path = path; r.Header.Set("X-User", user) })
	}

	for i, want := range []int{200, 200, 429} {
		w := req("/api/orders/1", "alice")
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d (%s)", i, w.Code, want, w.Body)
		}
		if w.Header().Get("RateLimit-Policy") != `"orders.minute";q=2;w=60` {
			t.Fatalf("request %d: the service's policy header was not passed on: %v", i, w.Header())
		}
		if want == 429 && (w.Header().Get("Retry-After") == "" || w.Header().Get("Content-Type") != "application/problem+json") {
			t.Fatalf("deny: %v %s", w.Header(), w.Body)
		}
	}
	if w := req("/api/orders/1", "bob"); w.Code != 200 {
		t.Fatalf("another user: %d", w.Code)
	}
	if w := req("/public", "alice"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("route without a rule: %d %v, want 200 without rate-limit headers", w.Code, w.Header())
	}

	t.Run("service_down_fails_open_by_default", func(t *testing.T) {
		srv.Close()
		for range 7 {
			if w := req("/api/orders/1", "alice"); w.Code != 200 {
				t.Fatalf("service down: %d, want the default fail-open", w.Code)
			}
		}
	})
	t.Run("service_down_fails_closed_when_asked", func(t *testing.T) {
		h := mustMiddleware(t, middleware.Options{Client: c, FailureMode: sluice.FailClosed, Guard: guard.Options{Timeout: time.Second}})(app)
		if w := get(h, nil); w.Code != 503 {
			t.Fatalf("%d, want 503", w.Code)
		}
	})
}

// TestRefusedKeyIsLogged: a remote service that refuses the middleware's key
// fails every check, and fail-open hides that from end users, so the
// middleware must say it in the log (once per interval, not per request).
func TestRefusedKeyIsLogged(t *testing.T) {
	srv, _ := serviceWithRule(t)
	c, err := client.New(srv.URL, "sk_not_a_key_of_this_service")
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	h := mustMiddleware(t, middleware.Options{Client: c, Logger: slog.New(slog.NewTextHandler(&logs, nil))})(&served{})
	for range 3 {
		if w := get(h, nil); w.Code != 200 {
			t.Fatalf("%d, want the default fail-open", w.Code)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "refuses the rate-limit middleware's API key"); n != 1 {
		t.Fatalf("want the refused key logged once, got %d times:\n%s", n, out)
	}
	if !strings.Contains(out, "status=401") || strings.Contains(out, "sk_not_a_key") {
		t.Fatalf("the log must give the status and never the key:\n%s", out)
	}
}

// countingTransport counts the calls a client makes of the network.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// countedClient is a client of the service at url whose calls are counted.
func countedClient(t *testing.T, url, secret string) (*client.Client, *countingTransport) {
	t.Helper()
	calls := &countingTransport{}
	c, err := client.New(url, secret, client.WithHTTPClient(&http.Client{Transport: calls, Timeout: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return c, calls
}

// TestRemoteServiceIsAStore: remote mode's store is a store like any other
// to the engine: a check with a route asks the service (a cost of 0 peeks,
// consuming nothing), and what the check API cannot do (a reset, a check
// without a route) is refused as unsupported, without asking the service
// and without counting against the breaker.
func TestRemoteServiceIsAStore(t *testing.T) {
	srv, secret := serviceWithRule(t)
	c, calls := countedClient(t, srv.URL, secret)
	var opened atomic.Bool
	engine := check.New(middleware.RemoteStore(c), check.Options{DenyCacheSize: -1,
		Guard: guard.Options{FailureThreshold: 1, OnStateChange: func(_, _, to string) { opened.Store(opened.Load() || to == "open") }}})
	t.Cleanup(func() { engine.Close() })
	// The limits are the failure mode local's; the service's rule decides.
	rule := engine.NewRule(metrics.Labels{}, check.Rule{Name: "remote", Mode: sluice.FailClosed,
		Limits: []sluice.Limit{sluice.FixedWindow(10, time.Hour).Named("local")}})
	ctx := middleware.WithRemoteRoute(context.Background(), "/api/orders/1")

	for i := range 3 {
		res, err := engine.Check(ctx, check.Query{Rule: rule, Subject: "alice", Cost: 0})
		if err != nil || !res.Pass() || res.Decision.Remaining != 2 {
			t.Fatalf("peek %d: %+v, %v; want allowed with both units left", i, res.Decision, err)
		}
	}
	for i, want := range []bool{true, true, false} {
		res, err := engine.Check(ctx, check.Query{Rule: rule, Subject: "alice", Cost: 1})
		if err != nil || res.Pass() != want {
			t.Fatalf("check %d: %+v, %v; want allowed %v (the peeks took nothing of the 2)", i, res.Decision, err, want)
		}
	}

	asked := calls.n.Load()
	if _, err := engine.Check(context.Background(), check.Query{Rule: rule, Subject: "alice", Cost: 1}); !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("check without a route: %v, want ErrUnsupported and ErrInvalid", err)
	}
	if err := engine.Reset(ctx, rule, "alice"); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "admin API") {
		t.Errorf("reset: %v, want ErrUnsupported pointing to the admin API", err)
	}
	if n := calls.n.Load(); n != asked {
		t.Errorf("the service was asked %d times for what the check API cannot do", n-asked)
	}
	if opened.Load() || engine.BreakerState() != "closed" {
		t.Errorf("breaker %s: refusing what the check API cannot do is no store failure", engine.BreakerState())
	}
}

// TestRemoteServiceDown: remote mode's checks take the engine's one entry
// point, so a dead service gets a store's treatment: each failed check is
// answered by the failure mode; after FailureThreshold failures the breaker
// opens and the service is no longer asked; once the service is back, a
// probe closes the breaker and the service's rule decides again, headers and
// all.
func TestRemoteServiceDown(t *testing.T) {
	rule := sluice.Rule{Tenant: "acme", Name: "orders", Route: "/api/orders*",
		Limits: []sluice.Limit{sluice.FixedWindow(100, time.Minute).Named("minute")}, FailureMode: sluice.FailClosed}
	h, secret := serviceHandler(t, rule)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *http.Server {
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	srv := serve(ln)
	c, calls := countedClient(t, "http://"+addr, secret)
	req := func(h http.Handler) *httptest.ResponseRecorder {
		return get(h, func(r *http.Request) { r.URL.Path = "/api/orders/1" })
	}
	const policy = `"orders.minute";q=100;w=60`

	t.Run("breaker", func(t *testing.T) {
		var mu sync.Mutex
		var states []string
		h := mustMiddleware(t, middleware.Options{Client: c, FailureMode: sluice.FailClosed,
			Guard: guard.Options{FailureThreshold: 3, OpenTimeout: 200 * time.Millisecond, OnStateChange: func(_, _, to string) {
				mu.Lock()
				states = append(states, to)
				mu.Unlock()
			}}})(&served{})
		if w := req(h); w.Code != 200 || w.Header().Get("RateLimit-Policy") != policy {
			t.Fatalf("service up: %d %v", w.Code, w.Header())
		}
		srv.Close()
		for i := range 3 {
			if w := req(h); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
				t.Fatalf("service down, check %d: %d %v, want 503 with Retry-After (fails closed)", i, w.Code, w.Header())
			}
		}
		asked := calls.n.Load()
		if w := req(h); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("breaker open: %d, want 503", w.Code)
		}
		if n := calls.n.Load(); n != asked {
			t.Fatalf("the service was asked %d times with the breaker open", n-asked)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		serve(ln)
		testenv.Eventually(t, 10*time.Second, "the service decides again", func() bool {
			w := req(h)
			return w.Code == 200 && w.Header().Get("RateLimit-Policy") == policy
		})
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(states, ",") != "open,half-open,closed" {
			t.Fatalf("breaker states %v, want open, half-open, closed", states)
		}
	})

	t.Run("failure_modes", func(t *testing.T) {
		dead, _ := countedClient(t, "http://127.0.0.1:1", secret)
		open := mustMiddleware(t, middleware.Options{Client: dead})(&served{})
		for range 3 {
			if w := req(open); w.Code != 200 || w.Header().Get("RateLimit-Policy") != "" {
				t.Fatalf("fail open: %d %v, want 200 without the service's headers", w.Code, w.Header())
			}
		}
		local := mustMiddleware(t, middleware.Options{Client: dead, Name: "fallback", FailureMode: sluice.FailLocal,
			Limits: []sluice.Limit{sluice.FixedWindow(1, time.Hour).Named("hour")}})(&served{})
		for i, want := range []int{200, 429} {
			w := req(local)
			if w.Code != want || w.Header().Get("RateLimit-Policy") != `"fallback.hour";q=1;w=3600` {
				t.Fatalf("fail local, request %d: %d %v, want %d under the local limit's policy", i, w.Code, w.Header(), want)
			}
		}
	})
}

// TestRemoteShadowRule: a shadow rule of the service lets every request
// through, with the service's headers.
func TestRemoteShadowRule(t *testing.T) {
	srv, secret := serviceWith(t, sluice.Rule{Tenant: "acme", Name: "orders", Route: "/api/orders*", Shadow: true,
		Limits: []sluice.Limit{sluice.FixedWindow(1, time.Minute).Named("minute")}, FailureMode: sluice.FailClosed})
	c, err := client.New(srv.URL, secret)
	if err != nil {
		t.Fatal(err)
	}
	app := &served{}
	h := mustMiddleware(t, middleware.Options{Client: c})(app)
	for i := range 3 {
		w := get(h, func(r *http.Request) { r.URL.Path = "/api/orders/1" })
		if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"orders.minute";q=1;w=60` {
			t.Fatalf("request %d: %d %v, want 200 with the service's headers", i, w.Code, w.Header())
		}
	}
	if app.n.Load() != 3 {
		t.Fatalf("%d of 3 requests reached the application", app.n.Load())
	}
}
