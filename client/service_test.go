package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/memory"
)

// startService serves the real check API (httpapi over a SQLite catalog
// holding rules and a memory store) and returns its URL and a check key.
func startService(t testing.TB, rules ...sluice.Rule) (url, secret string) {
	t.Helper()
	url, secret, _ = startStoppableService(t, rules...)
	return url, secret
}

// startStoppableService is startService, and stop shuts the service down
// (its listener closed: calls fail as with a service gone).
func startStoppableService(t testing.TB, rules ...sluice.Rule) (url, secret string, stop func()) {
	t.Helper()
	catalog, secret := catalogtest.SQLiteTenant(t, rules...)
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	g := check.New(store, check.Options{})
	t.Cleanup(func() { g.Close() })
	api, err := httpapi.New(context.Background(), httpapi.Options{Catalog: catalog, Engine: g, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, secret, srv.Close
}

// TestCheckAgainstTheService runs the client against the real check API
// (httpapi over a SQLite catalog and a memory store).
func TestCheckAgainstTheService(t *testing.T) {
	ctx := context.Background()
	url, secret := startService(t, sluice.Rule{Tenant: "acme", Name: "orders", Route: "/api/orders*",
		Limits: []sluice.Limit{sluice.FixedWindow(2, time.Minute).Named("minute")}, FailureMode: sluice.FailClosed})
	c, err := client.New(url, secret)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		res, err := c.Check(ctx, "/api/orders/17", "user-42", 1)
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if res.Allowed != want || res.Rule != "orders" || res.Limit != 2 || len(res.Limits) != 1 || res.Limits[0].Name != "minute" {
			t.Fatalf("check %d: %+v, want allowed=%v under rule orders", i, res, want)
		}
		if res.Header.Get("X-RateLimit-Limit") != "2" {
			t.Fatalf("check %d: headers %v", i, res.Header)
		}
		if !want && (res.RetryAfter <= 0 || res.Header.Get("Retry-After") == "") {
			t.Fatalf("deny without retry: %+v", res)
		}
	}
	if res, err := c.Check(ctx, "/elsewhere", "user-42", 1); err != nil || !res.Allowed || res.Rule != "" {
		t.Fatalf("unmatched route: %+v %v, want allowed with no rule", res, err)
	}
	_, err = c.Check(ctx, "/api/orders/1", "user-42", 3)
	if !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("cost that can never fit: %v, want ErrInvalid", err)
	}

	bad, _ := client.New(url, "sk_not_a_key")
	_, err = bad.Check(ctx, "/api/orders/1", "user-42", 1)
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 401 || e.Code == "" || e.Message == "" {
		t.Fatalf("unknown key: %v, want a 401 *client.Error with code and message", err)
	}
}
