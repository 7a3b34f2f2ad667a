package middleware_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/middleware"
)

// serviceWith runs the real check API with one tenant, one check key and
// rule.
func serviceWith(t *testing.T, rule sluice.Rule) (*httptest.Server, string) {
	t.Helper()
	catalog, secret := catalogtest.SQLiteTenant(t, rule)
	g := check.New(newMemory(t), check.Options{})
	t.Cleanup(func() { g.Close() })
	api, err := httpapi.New(context.Background(), httpapi.Options{Catalog: catalog, Engine: g, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return srv, secret
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
