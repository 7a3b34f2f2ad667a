package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/sqlite"
)

// TestAdminAgainstTheService runs every Admin call against the real admin
// API (httpapi over a SQLite catalog and a memory store).
func TestAdminAgainstTheService(t *testing.T) {
	ctx := context.Background()
	const token = "client-admin-test-token-0123456789"
	catalog, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer catalog.Close()
	if err := catalog.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := catalog.SetAdminTokenHash(ctx, sluice.HashAPIKey(token)); err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{})
	defer store.Close()
	g := check.New(store, check.Options{})
	defer g.Close()
	api, err := httpapi.New(ctx, httpapi.Options{Catalog: catalog, Engine: g, DefaultFailureMode: sluice.FailLocal,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()

	a, err := client.NewAdmin(srv.URL+"/", token)
	if err != nil {
		t.Fatal(err)
	}
	if tn, err := a.CreateTenant(ctx, "acme"); err != nil || tn.Name != "acme" || tn.Status != "active" || tn.CreatedAt.IsZero() {
		t.Fatalf("CreateTenant: %+v, %v", tn, err)
	}
	var e *client.Error
	if _, err := a.CreateTenant(ctx, "acme"); !errors.Is(err, sluice.ErrConflict) || !errors.As(err, &e) || e.StatusCode != 409 || e.Code != "conflict" || e.Message == "" {
		t.Fatalf("duplicate tenant: %v, want a 409 conflict *Error matching sluice.ErrConflict", err)
	}
	if ts, err := a.Tenants(ctx); err != nil || len(ts) != 1 || ts[0].Name != "acme" {
		t.Fatalf("Tenants: %+v, %v", ts, err)
	}
	if tn, err := a.SetTenantStatus(ctx, "acme", "suspended"); err != nil || tn.Status != "suspended" {
		t.Fatalf("SetTenantStatus: %+v, %v", tn, err)
	}
	if tn, err := a.SetTenantStatus(ctx, "acme", "active"); err != nil || tn.Status != "active" {
		t.Fatalf("SetTenantStatus: %+v, %v", tn, err)
	}
	if tn, err := a.Tenant(ctx, "acme"); err != nil || tn.Status != "active" {
		t.Fatalf("Tenant: %+v, %v", tn, err)
	}

	k, err := a.CreateKey(ctx, "acme", "web", "check")
	if err != nil || k.Secret == "" || k.ID == "" || k.Name != "web" || k.Role != "check" || k.RevokedAt != nil {
		t.Fatalf("CreateKey: %+v, %v", k, err)
	}
	if ks, err := a.Keys(ctx, "acme"); err != nil || len(ks) != 1 || ks[0].ID != k.ID || ks[0].Secret != "" {
		t.Fatalf("Keys: %+v, %v", ks, err)
	}

	capacity, refill := int64(10), 2.0
	r, err := a.PutRule(ctx, client.Rule{Tenant: "acme", Name: "orders", Route: "/api/orders*",
		Limits: []client.Limit{{Name: "burst", Algorithm: "token_bucket", Capacity: &capacity, RefillPerSecond: &refill}}})
	// Stored without one: the serving instance applies its default (here
	// local) at check time.
	if err != nil || r.FailureMode != "" || r.Tenant != "acme" || len(r.Limits) != 1 || *r.Limits[0].Capacity != 10 {
		t.Fatalf("PutRule without a failure mode: %+v, %v; want none stored (the server's default)", r, err)
	}
	if rs, err := a.Rules(ctx, "acme"); err != nil || len(rs) != 1 || rs[0].Name != "orders" {
		t.Fatalf("Rules: %+v, %v", rs, err)
	}
	if r, err := a.Rule(ctx, "acme", "orders"); err != nil || r.Route != "/api/orders*" {
		t.Fatalf("Rule: %+v, %v", r, err)
	}
	if _, err := a.Rule(ctx, "acme", "nope"); !errors.Is(err, sluice.ErrNotFound) {
		t.Fatalf("missing rule: %v, want sluice.ErrNotFound", err)
	}
	if _, err := a.PutRule(ctx, client.Rule{Tenant: "acme", Name: "bad", Route: "/x"}); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("rule without limits: %v, want sluice.ErrInvalid", err)
	}

	// A subject may hold '/': it travels escaped.
	for _, subject := range []string{"user-42", "10.0.0.0/8", "a b?c#d"} {
		if err := a.ResetSubject(ctx, "acme", "orders", subject); err != nil {
			t.Fatalf("ResetSubject(%q): %v", subject, err)
		}
	}
	if err := a.RevokeKey(ctx, "acme", k.ID); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	if ks, _ := a.Keys(ctx, "acme"); len(ks) != 1 || ks[0].RevokedAt == nil {
		t.Fatalf("Keys after revoke: %+v", ks)
	}
	if err := a.DeleteRule(ctx, "acme", "orders"); err != nil {
		t.Fatalf("DeleteRule: %v", err)
	}
	if err := a.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatalf("DeleteTenant: %v", err)
	}

	bad, _ := client.NewAdmin(srv.URL, "wrong-token")
	if _, err := bad.Tenants(ctx); !errors.As(err, &e) || e.StatusCode != 401 || e.Code != "invalid_credentials" {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := client.NewAdmin("localhost:8080", token); err == nil {
		t.Fatal("NewAdmin accepted a URL without a scheme")
	}
	if _, err := client.NewAdmin(srv.URL, ""); err == nil {
		t.Fatal("NewAdmin accepted an empty token")
	}
}
