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

// serviceWithRule runs the real check API with one tenant, one check key and
// a rule of 2 per minute on /api/orders*.
func serviceWithRule(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	ctx := context.Background()
	catalog, secret := catalogtest.SQLiteTenant(t, sluice.Rule{Tenant: "acme", Name: "orders", Route: "/api/orders*",
		Limits: []sluice.Limit{sluice.FixedWindow(2, time.Minute).Named("minute")}, FailureMode: sluice.FailClosed})
	g := check.New(newMemory(t), check.Options{})
	t.Cleanup(func() { g.Close() })
	api, err := httpapi.New(ctx, httpapi.Options{Catalog: catalog, Engine: g, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return srv, secret
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
