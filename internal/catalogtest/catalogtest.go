// Package catalogtest is the contract every sluice.Catalog must meet, run
// against real databases by package postgres and package sqlite:
//
//	catalogtest.Run(t, func(t *testing.T) catalogtest.Open { ... })
package catalogtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// Catalog is a sluice.Catalog that can migrate its schema and enforce
// per-tenant caps, as both implementations do.
type Catalog interface {
	sluice.Catalog
	Migrate(ctx context.Context) error
	SetTenantCaps(sluice.TenantCaps)
	PruneAudit(ctx context.Context, before time.Time, limit int) (int64, error)
	RunAuditRetention(ctx context.Context, retention time.Duration, log *slog.Logger)
	CheckWritable(ctx context.Context) error
}

// Open opens a new, unmigrated Catalog instance on one database; each call
// is another instance sharing it, as another process would. It closes the
// instance when t ends.
type Open func(t *testing.T) Catalog

// propagation is how soon a change must reach every instance.
const propagation = time.Second

// Run runs the contract. newDatabase creates a fresh, empty database for one
// test and returns how to open instances on it.
func Run(t *testing.T, newDatabase func(t *testing.T) Open) {
	// fresh returns a migrated instance on a new database, and how to open
	// more on it.
	fresh := func(t *testing.T) (Catalog, Open) {
		open := newDatabase(t)
		c := open(t)
		if err := c.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		return c, open
	}
	tests := []struct {
		name string
		test func(t *testing.T, c Catalog, open Open)
	}{
		{"tenant_lifecycle", testTenantLifecycle},
		{"duplicate_names_conflict", testDuplicates},
		{"missing_things_are_not_found", testNotFound},
		{"invalid_input_changes_nothing", testInvalidInput},
		{"keys_create_list_revoke", testKeys},
		{"rules_create_replace_delete", testRules},
		{"rule_route_taken_by_another_rule_conflicts", testRouteConflict},
		{"rule_plans_are_stored_with_it", testPlans},
		{"overrides_create_replace_delete", testOverrides},
		{"tenant_delete_cascades", testTenantDeleteCascades},
		{"admin_token_hash", testAdminToken},
		{"admin_token_hash_if_absent_stores_exactly_one", testAdminTokenIfAbsent},
		{"concurrent_writers_on_two_instances", testConcurrentWriters},
		{"tenant_caps_hold_under_concurrent_creates", testTenantCaps},
		{"lists_are_in_byte_order_of_names", testListOrder},
		{"snapshot_holds_what_checks_need", testSnapshot},
		{"version_increments_on_every_change", testVersion},
		{"watch_sees_change_from_another_instance", testWatchOtherInstance},
		{"reset_reaches_another_instance", testResetOtherInstance},
		{"watch_returns_when_context_ends", testWatchReturns},
		{"watch_returns_when_catalog_closes", testWatchReturnsOnClose},
		{"migrate_is_idempotent", testMigrate},
		{"audit_records_every_change", testAudit},
		{"audit_keeps_every_field_of_a_limit", testAuditKeepsEveryLimitField},
		{"recreated_tenant_gets_a_new_counter_namespace", testGenerations},
		{"audit_filters_and_pages", testAuditQueries},
		{"audit_prune_deletes_old_entries_in_batches", testAuditPrune},
		{"audit_retention_prunes_in_the_background", testAuditRetention},
		{"write_probe_of_a_writable_database_passes", testCheckWritable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, open := fresh(t)
			tt.test(t, c, open)
		})
	}
	t.Run("migrate_concurrently_on_a_fresh_database", func(t *testing.T) {
		testConcurrentMigrate(t, newDatabase(t))
	})
}

// must(call())(t) returns call's value, failing t if call failed.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v; want one wrapping %v", what, err, target)
	}
	if err != nil && err.Error() == target.Error() {
		t.Errorf("%s: error %q does not say what was wrong", what, err)
	}
}

func version(t *testing.T, c sluice.Catalog) int64 {
	t.Helper()
	return must(c.Version(t.Context()))(t)
}

func rule(tenant, name, route string, limits ...sluice.Limit) sluice.Rule {
	if len(limits) == 0 {
		limits = []sluice.Limit{sluice.TokenBucket(10, 2)}
	}
	return sluice.Rule{Tenant: tenant, Name: name, Route: route, Limits: limits}
}

func testTenantLifecycle(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	before := time.Now().Add(-time.Second)
	acme := must(c.CreateTenant(ctx, "acme"))(t)
	if acme.Name != "acme" || acme.Status != sluice.TenantActive || acme.CreatedAt.Before(before) {
		t.Fatalf("CreateTenant = %+v", acme)
	}
	must(c.CreateTenant(ctx, "beta"))(t)
	got := must(c.Tenant(ctx, "acme"))(t)
	if got.Name != acme.Name || got.Status != acme.Status || !got.CreatedAt.Equal(acme.CreatedAt) {
		t.Fatalf("Tenant = %+v; want %+v", got, acme)
	}
	if names := tenantNames(must(c.Tenants(ctx))(t)); !slices.Equal(names, []string{"acme", "beta"}) {
		t.Fatalf("Tenants = %v", names)
	}
	suspended := must(c.SetTenantStatus(ctx, "acme", sluice.TenantSuspended))(t)
	if suspended.Status != sluice.TenantSuspended || must(c.Tenant(ctx, "acme"))(t).Status != sluice.TenantSuspended {
		t.Fatalf("tenant not suspended: %+v", suspended)
	}
	must(c.SetTenantStatus(ctx, "acme", sluice.TenantActive))(t)
	if err := c.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Tenant(ctx, "acme")
	wantErr(t, "Tenant after delete", err, sluice.ErrNotFound)
	if names := tenantNames(must(c.Tenants(ctx))(t)); !slices.Equal(names, []string{"beta"}) {
		t.Fatalf("Tenants after delete = %v", names)
	}
}

func tenantNames(ts []sluice.Tenant) []string {
	var names []string
	for _, t := range ts {
		names = append(names, t.Name)
	}
	return names
}

func testDuplicates(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	_, hash := sluice.NewAPIKeySecret()
	must(c.CreateKey(ctx, "acme", "ci", sluice.RoleCheck, hash))(t)
	v := version(t, c)

	_, err := c.CreateTenant(ctx, "acme")
	wantErr(t, "second tenant acme", err, sluice.ErrConflict)
	_, otherHash := sluice.NewAPIKeySecret()
	_, err = c.CreateKey(ctx, "acme", "ci", sluice.RoleAdmin, otherHash)
	wantErr(t, "second active key named ci", err, sluice.ErrConflict)
	_, err = c.CreateKey(ctx, "acme", "other", sluice.RoleCheck, hash)
	wantErr(t, "second key with the same secret", err, sluice.ErrConflict)
	if got := version(t, c); got != v {
		t.Fatalf("failed calls moved the version from %d to %d", v, got)
	}
	if keys := must(c.Keys(ctx, "acme"))(t); len(keys) != 1 {
		t.Fatalf("failed CreateKey left %d keys", len(keys))
	}
}

func testNotFound(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	_, hash := sluice.NewAPIKeySecret()
	v := version(t, c)
	calls := map[string]func() error{
		"Tenant":                 func() error { _, err := c.Tenant(ctx, "ghost"); return err },
		"SetTenantStatus":        func() error { _, err := c.SetTenantStatus(ctx, "ghost", sluice.TenantSuspended); return err },
		"DeleteTenant":           func() error { return c.DeleteTenant(ctx, "ghost") },
		"CreateKey_of_ghost":     func() error { _, err := c.CreateKey(ctx, "ghost", "ci", sluice.RoleCheck, hash); return err },
		"Keys_of_ghost":          func() error { _, err := c.Keys(ctx, "ghost"); return err },
		"RevokeKey":              func() error { _, err := c.RevokeKey(ctx, "acme", "key_nope"); return err },
		"PutRule_of_ghost":       func() error { _, err := c.PutRule(ctx, rule("ghost", "r", "*")); return err },
		"Rule":                   func() error { _, err := c.Rule(ctx, "acme", "nope"); return err },
		"Rule_of_ghost":          func() error { _, err := c.Rule(ctx, "ghost", "nope"); return err },
		"Rule_with_empty_names":  func() error { _, err := c.Rule(ctx, "", ""); return err },
		"Rules_of_ghost":         func() error { _, err := c.Rules(ctx, "ghost"); return err },
		"DeleteRule":             func() error { return c.DeleteRule(ctx, "acme", "nope") },
		"AdminTokenHash_not_set": func() error { _, err := c.AdminTokenHash(ctx); return err },
	}
	for name, call := range calls {
		wantErr(t, name, call(), sluice.ErrNotFound)
	}
	if got := version(t, c); got != v {
		t.Fatalf("failed calls moved the version from %d to %d", v, got)
	}
	if rules := must(c.Rules(ctx, "acme"))(t); len(rules) != 0 {
		t.Fatalf("Rules of a tenant without rules = %v; want none", rules)
	}
}

func testInvalidInput(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	_, hash := sluice.NewAPIKeySecret()
	good := rule("acme", "orders", "/api/orders*")
	must(c.PutRule(ctx, good))(t)
	v := version(t, c)
	withRule := func(mutate func(*sluice.Rule)) func() error {
		return func() error {
			r := good
			r.Limits = slices.Clone(good.Limits)
			mutate(&r)
			_, err := c.PutRule(ctx, r)
			return err
		}
	}
	calls := map[string]func() error{
		"tenant_name_uppercase": func() error { _, err := c.CreateTenant(ctx, "Acme"); return err },
		"tenant_name_empty":     func() error { _, err := c.CreateTenant(ctx, ""); return err },
		"tenant_name_too_long":  func() error { _, err := c.CreateTenant(ctx, string(make([]byte, 64))); return err },
		"tenant_status_unknown": func() error { _, err := c.SetTenantStatus(ctx, "acme", "paused"); return err },
		"key_name_invalid":      func() error { _, err := c.CreateKey(ctx, "acme", "my key", sluice.RoleCheck, hash); return err },
		"key_role_unknown":      func() error { _, err := c.CreateKey(ctx, "acme", "ci", "root", hash); return err },
		"key_hash_short":        func() error { _, err := c.CreateKey(ctx, "acme", "ci", sluice.RoleCheck, hash[:16]); return err },
		"rule_route_empty":      withRule(func(r *sluice.Rule) { r.Route = "" }),
		"rule_route_10KB":       withRule(func(r *sluice.Rule) { r.Route = "/" + string(bytes.Repeat([]byte("a"), 10<<10)) }),
		"rule_route_star_mid":   withRule(func(r *sluice.Rule) { r.Route = "/api/*/x" }),
		"rule_no_limits":        withRule(func(r *sluice.Rule) { r.Limits = nil }),
		"rule_zero_capacity":    withRule(func(r *sluice.Rule) { r.Limits = []sluice.Limit{sluice.TokenBucket(0, 1)} }),
		"rule_zero_window":      withRule(func(r *sluice.Rule) { r.Limits = []sluice.Limit{sluice.SlidingWindow(5, 0)} }),
		"rule_failure_mode":     withRule(func(r *sluice.Rule) { r.FailureMode = "maybe" }),
		"rule_name_invalid":     withRule(func(r *sluice.Rule) { r.Name = "Orders!" }),
		"admin_hash_empty":      func() error { return c.SetAdminTokenHash(ctx, nil) },
		"reset_rule_invalid":    func() error { return c.PublishReset(ctx, "acme", "", "user-1") },
	}
	for name, call := range calls {
		wantErr(t, name, call(), sluice.ErrInvalid)
	}
	if got := version(t, c); got != v {
		t.Fatalf("invalid calls moved the version from %d to %d", v, got)
	}
	if got := must(c.Rule(ctx, "acme", "orders"))(t); got.Route != good.Route || len(got.Limits) != 1 {
		t.Fatalf("invalid PutRule changed the rule: %+v", got)
	}
	if keys := must(c.Keys(ctx, "acme"))(t); len(keys) != 0 {
		t.Fatalf("invalid CreateKey left keys: %+v", keys)
	}
	if tenants := must(c.Tenants(ctx))(t); len(tenants) != 1 || tenants[0].Status != sluice.TenantActive {
		t.Fatalf("invalid calls changed tenants: %+v", tenants)
	}
}

func testKeys(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	secret, hash := sluice.NewAPIKeySecret()
	k := must(c.CreateKey(ctx, "acme", "ci", sluice.RoleCheck, hash))(t)
	if k.ID == "" || k.Tenant != "acme" || k.Name != "ci" || k.Role != sluice.RoleCheck || k.RevokedAt != nil || k.CreatedAt.IsZero() {
		t.Fatalf("CreateKey = %+v", k)
	}
	_, adminHash := sluice.NewAPIKeySecret()
	admin := must(c.CreateKey(ctx, "acme", "ops", sluice.RoleAdmin, adminHash))(t)
	keys := must(c.Keys(ctx, "acme"))(t)
	if len(keys) != 2 || keys[0].ID != k.ID || keys[1].ID != admin.ID || keys[1].Role != sluice.RoleAdmin {
		t.Fatalf("Keys = %+v", keys)
	}
	if g, ok := must(c.Snapshot(ctx))(t).Key(secret); !ok || g.KeyID != k.ID || g.Tenant != "acme" || g.Role != sluice.RoleCheck {
		t.Fatalf("snapshot Key = %+v, %v", g, ok)
	}

	revoked := must(c.RevokeKey(ctx, "acme", k.ID))(t)
	if revoked.RevokedAt == nil {
		t.Fatalf("RevokeKey = %+v; want RevokedAt set", revoked)
	}
	if _, ok := must(c.Snapshot(ctx))(t).Key(secret); ok {
		t.Fatal("revoked key is still in the snapshot")
	}
	again := must(c.RevokeKey(ctx, "acme", k.ID))(t)
	if again.RevokedAt == nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Fatalf("second revoke changed RevokedAt: %v then %v", revoked.RevokedAt, again.RevokedAt)
	}
	_, err := c.RevokeKey(ctx, "other", admin.ID)
	wantErr(t, "revoking a key through another tenant", err, sluice.ErrNotFound)

	_, newHash := sluice.NewAPIKeySecret()
	must(c.CreateKey(ctx, "acme", "ci", sluice.RoleCheck, newHash))(t) // the name is free again
	if keys := must(c.Keys(ctx, "acme"))(t); len(keys) != 3 || keys[0].RevokedAt == nil {
		t.Fatalf("Keys after revoke = %+v; want the revoked key listed as revoked", keys)
	}
}

func testRules(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	orders := rule("acme", "orders", "/api/orders*",
		leased(sluice.TokenBucket(100, 0.5).Named("burst")),
		sluice.SlidingWindow(600, time.Minute).Named("minute"),
		leased(sluice.FixedWindow(10000, 24*time.Hour).Named("day")),
		// Credits and calendar windows keep their refill, period and zone.
		sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 1000, Mode: sluice.RefillSet}),
		sluice.Credits(sluice.Refill{Period: 12 * time.Hour, Amount: 5, Mode: sluice.RefillAdd, Max: 50}).Named("tokens"),
		sluice.Limit{Name: "month", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 1_000_000, Calendar: sluice.CalendarMonth, TimeZone: "Europe/Berlin"})
	stored := must(c.PutRule(ctx, orders))(t)
	// No failure mode is stored as none, so the serving instance's
	// --default-failure-mode decides, whoever wrote the rule.
	if stored.FailureMode != "" || stored.UpdatedAt.IsZero() {
		t.Fatalf("PutRule = %+v; want no failure mode (the server's default) and UpdatedAt set", stored)
	}
	got := must(c.Rule(ctx, "acme", "orders"))(t)
	assertRule(t, got, stored)

	replaced := rule("acme", "orders", "/api/orders", sluice.PerSecond(5).Named("rate"))
	replaced.FailureMode, replaced.Shadow = sluice.FailLocal, true
	must(c.PutRule(ctx, replaced))(t)
	got = must(c.Rule(ctx, "acme", "orders"))(t)
	replaced.UpdatedAt = got.UpdatedAt
	assertRule(t, got, replaced)

	must(c.PutRule(ctx, rule("acme", "all", "*")))(t)
	if rules := must(c.Rules(ctx, "acme"))(t); len(rules) != 2 || rules[0].Name != "all" || rules[1].Name != "orders" || len(rules[1].Limits) != 1 {
		t.Fatalf("Rules = %+v", rules)
	}
	if err := c.DeleteRule(ctx, "acme", "orders"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Rule(ctx, "acme", "orders")
	wantErr(t, "Rule after delete", err, sluice.ErrNotFound)
	if rules := must(c.Rules(ctx, "acme"))(t); len(rules) != 1 {
		t.Fatalf("Rules after delete = %+v", rules)
	}
}

// leased is l opted in to quota leases, which the catalog keeps.
func leased(l sluice.Limit) sluice.Limit {
	l.Lease = sluice.LeaseAuto
	return l
}

func assertRule(t *testing.T, got, want sluice.Rule) {
	t.Helper()
	if got.Tenant != want.Tenant || got.Name != want.Name || got.Route != want.Route ||
		got.FailureMode != want.FailureMode || got.Shadow != want.Shadow || !got.UpdatedAt.Equal(want.UpdatedAt) ||
		!slices.Equal(got.Limits, want.Limits) {
		t.Fatalf("rule = %+v\nwant %+v", got, want)
	}
}

func testRouteConflict(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	must(c.CreateTenant(ctx, "beta"))(t)
	must(c.PutRule(ctx, rule("acme", "orders", "/api/orders*")))(t)
	must(c.PutRule(ctx, rule("acme", "other", "/api/other")))(t)
	v := version(t, c)
	_, err := c.PutRule(ctx, rule("acme", "copy", "/api/orders*"))
	wantErr(t, "new rule on a taken route", err, sluice.ErrConflict)
	_, err = c.PutRule(ctx, rule("acme", "other", "/api/orders*"))
	wantErr(t, "replacing a rule onto a taken route", err, sluice.ErrConflict)
	if got := version(t, c); got != v {
		t.Fatalf("failed PutRule moved the version from %d to %d", v, got)
	}
	if got := must(c.Rule(ctx, "acme", "other"))(t); got.Route != "/api/other" {
		t.Fatalf("failed PutRule changed the rule: %+v", got)
	}
	must(c.PutRule(ctx, rule("beta", "orders", "/api/orders*")))(t) // another tenant may
	must(c.PutRule(ctx, rule("acme", "orders", "/api/orders*")))(t) // replacing itself may
}

func testTenantDeleteCascades(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	must(c.CreateTenant(ctx, "beta"))(t)
	secret, hash := sluice.NewAPIKeySecret()
	must(c.CreateKey(ctx, "acme", "ci", sluice.RoleCheck, hash))(t)
	must(c.PutRule(ctx, rule("acme", "orders", "/api/orders*")))(t)
	betaSecret, betaHash := sluice.NewAPIKeySecret()
	must(c.CreateKey(ctx, "beta", "ci", sluice.RoleCheck, betaHash))(t)
	must(c.PutRule(ctx, rule("beta", "orders", "/api/orders*")))(t)

	if err := c.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	snap := must(c.Snapshot(ctx))(t)
	if _, ok := snap.Key(secret); ok {
		t.Fatal("deleted tenant's key is still in the snapshot")
	}
	if _, ok := snap.Match("acme", "/api/orders/1"); ok {
		t.Fatal("deleted tenant's rule is still in the snapshot")
	}
	if _, ok := snap.Key(betaSecret); !ok {
		t.Fatal("another tenant's key went with it")
	}
	must(c.CreateTenant(ctx, "acme"))(t)
	if keys := must(c.Keys(ctx, "acme"))(t); len(keys) != 0 {
		t.Fatalf("recreated tenant inherited keys %+v", keys)
	}
	if rules := must(c.Rules(ctx, "acme"))(t); len(rules) != 0 {
		t.Fatalf("recreated tenant inherited rules %+v", rules)
	}
	if rules := must(c.Rules(ctx, "beta"))(t); len(rules) != 1 || len(rules[0].Limits) != 1 {
		t.Fatalf("another tenant's rules changed: %+v", rules)
	}
}

func testAdminToken(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	first := sluice.HashAPIKey("first")
	second := sluice.HashAPIKey("second")
	if err := c.SetAdminTokenHash(ctx, first); err != nil {
		t.Fatal(err)
	}
	if got := must(c.AdminTokenHash(ctx))(t); !bytes.Equal(got, first) {
		t.Fatalf("AdminTokenHash = %x; want %x", got, first)
	}
	if err := c.SetAdminTokenHash(ctx, second); err != nil {
		t.Fatal(err)
	}
	if got := must(c.AdminTokenHash(ctx))(t); !bytes.Equal(got, second) {
		t.Fatalf("AdminTokenHash after replace = %x; want %x", got, second)
	}
	if got := must(c.Snapshot(ctx))(t).AdminTokenHash; !bytes.Equal(got, second) {
		t.Fatalf("snapshot AdminTokenHash = %x; want %x", got, second)
	}
}

func testSnapshot(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	empty := must(c.Snapshot(ctx))(t)
	if len(empty.Tenants) != 0 || len(empty.Keys) != 0 || empty.AdminTokenHash != nil {
		t.Fatalf("snapshot of an empty catalog = %+v", empty)
	}
	must(c.CreateTenant(ctx, "acme"))(t)
	must(c.CreateTenant(ctx, "beta"))(t)
	must(c.SetTenantStatus(ctx, "beta", sluice.TenantSuspended))(t)
	checkSecret, checkHash := sluice.NewAPIKeySecret()
	adminSecret, adminHash := sluice.NewAPIKeySecret()
	betaSecret, betaHash := sluice.NewAPIKeySecret()
	ck := must(c.CreateKey(ctx, "acme", "ci", sluice.RoleCheck, checkHash))(t)
	ak := must(c.CreateKey(ctx, "acme", "ops", sluice.RoleAdmin, adminHash))(t)
	must(c.CreateKey(ctx, "beta", "ci", sluice.RoleCheck, betaHash))(t)
	must(c.PutRule(ctx, rule("acme", "orders-exact", "/api/orders")))(t)
	must(c.PutRule(ctx, rule("acme", "orders", "/api/orders*")))(t)
	must(c.PutRule(ctx, rule("acme", "all", "*", sluice.SlidingWindow(5, time.Second))))(t)

	snap := must(c.Snapshot(ctx))(t)
	if snap.Version != version(t, c) {
		t.Fatalf("snapshot version %d, catalog version %d", snap.Version, version(t, c))
	}
	if len(snap.Tenants) != 2 || snap.Tenants["beta"].Status != sluice.TenantSuspended || snap.Tenants["acme"].Status != sluice.TenantActive {
		t.Fatalf("snapshot tenants = %+v", snap.Tenants)
	}
	for secret, want := range map[string]sluice.KeyGrant{
		checkSecret: {Tenant: "acme", KeyID: ck.ID, Role: sluice.RoleCheck},
		adminSecret: {Tenant: "acme", KeyID: ak.ID, Role: sluice.RoleAdmin},
	} {
		if got, ok := snap.Key(secret); !ok || got != want {
			t.Fatalf("snapshot Key = %+v, %v; want %+v", got, ok, want)
		}
	}
	if g, ok := snap.Key(betaSecret); !ok || g.Tenant != "beta" {
		t.Fatal("a suspended tenant's key must stay in the snapshot, so checks answer 403 rather than 401")
	}
	for route, want := range map[string]string{"/api/orders": "orders-exact", "/api/orders/9": "orders", "/x": "all"} {
		if r, ok := snap.Match("acme", route); !ok || r.Name != want {
			t.Fatalf("snapshot Match(%q) = %q, %v; want %q", route, r.Name, ok, want)
		}
	}
	if r, _ := snap.Match("acme", "/x"); len(r.Limits) != 1 || r.Limits[0].Window != time.Second {
		t.Fatalf("snapshot rule lost its limits: %+v", r)
	}
	if _, ok := snap.Match("beta", "/api/orders"); ok {
		t.Fatal("beta matched acme's rule")
	}
}

func testVersion(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	_, hash := sluice.NewAPIKeySecret()
	var keyID string
	changes := []struct {
		name string
		do   func() error
	}{
		{"CreateTenant", func() error { _, err := c.CreateTenant(ctx, "acme"); return err }},
		{"SetTenantStatus", func() error { _, err := c.SetTenantStatus(ctx, "acme", sluice.TenantSuspended); return err }},
		{"CreateKey", func() error {
			k, err := c.CreateKey(ctx, "acme", "ci", sluice.RoleCheck, hash)
			keyID = k.ID
			return err
		}},
		{"RevokeKey", func() error { _, err := c.RevokeKey(ctx, "acme", keyID); return err }},
		{"PutRule", func() error { _, err := c.PutRule(ctx, rule("acme", "r", "*")); return err }},
		{"PutRule_replace", func() error { _, err := c.PutRule(ctx, rule("acme", "r", "/a")); return err }},
		{"DeleteRule", func() error { return c.DeleteRule(ctx, "acme", "r") }},
		{"SetAdminTokenHash", func() error { return c.SetAdminTokenHash(ctx, hash) }},
		{"DeleteTenant", func() error { return c.DeleteTenant(ctx, "acme") }},
	}
	last := version(t, c)
	for _, ch := range changes {
		if err := ch.do(); err != nil {
			t.Fatalf("%s: %v", ch.name, err)
		}
		v := version(t, c)
		if v <= last {
			t.Fatalf("%s: version went from %d to %d; want it to grow", ch.name, last, v)
		}
		last = v
	}
	if err := c.PublishReset(ctx, "acme", "r", "user"); err != nil {
		t.Fatal(err)
	}
	if v := version(t, c); v != last {
		t.Fatalf("PublishReset moved the version from %d to %d; a reset is no catalog change", last, v)
	}
}

// recorder collects what a Watch reports.
type recorder struct {
	mu     sync.Mutex
	events []sluice.Event
	signal chan struct{}
}

func watch(t *testing.T, c sluice.Catalog) *recorder {
	t.Helper()
	r := &recorder{signal: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, func(e sluice.Event) {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
			select {
			case r.signal <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v", err)
		}
	})
	r.waitFor(t, "the initial event", 5*time.Second, func(sluice.Event) bool { return true })
	return r
}

// waitFor waits until some event satisfies ok, at most within.
func (r *recorder) waitFor(t *testing.T, what string, within time.Duration, ok func(sluice.Event) bool) sluice.Event {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, e := range r.events {
			if ok(e) {
				r.mu.Unlock()
				return e
			}
		}
		r.mu.Unlock()
		select {
		case <-r.signal:
		case <-deadline.C:
			t.Fatalf("Watch did not report %s within %v", what, within)
		}
	}
}

func testWatchOtherInstance(t *testing.T, c Catalog, open Open) {
	ctx := t.Context()
	other := open(t)
	rec := watch(t, other)
	if first := rec.waitFor(t, "the initial event", time.Second, func(sluice.Event) bool { return true }); first.Version != version(t, c) || first.Reset != nil {
		t.Fatalf("initial event %+v; want the current version %d", first, version(t, c))
	}
	for i, change := range []func() error{
		func() error { _, err := c.CreateTenant(ctx, "acme"); return err },
		func() error { _, err := c.PutRule(ctx, rule("acme", "r", "*")); return err },
		func() error { _, err := c.SetTenantStatus(ctx, "acme", sluice.TenantSuspended); return err },
	} {
		if err := change(); err != nil {
			t.Fatal(err)
		}
		want := version(t, c)
		rec.waitFor(t, "change "+string(rune('1'+i)), propagation, func(e sluice.Event) bool { return e.Reset == nil && e.Version >= want })
	}
	if snap := must(other.Snapshot(ctx))(t); snap.Tenants["acme"].Status != sluice.TenantSuspended {
		t.Fatal("the other instance's snapshot does not show the change it was told about")
	}
}

func testResetOtherInstance(t *testing.T, c Catalog, open Open) {
	ctx := t.Context()
	other := open(t)
	rec := watch(t, other)
	self := watch(t, c)
	want := sluice.SubjectReset{Tenant: "acme", Rule: "orders", Subject: "user-42"}
	if err := c.PublishReset(ctx, want.Tenant, want.Rule, want.Subject); err != nil {
		t.Fatal(err)
	}
	isReset := func(e sluice.Event) bool { return e.Reset != nil && *e.Reset == want }
	rec.waitFor(t, "the reset on another instance", propagation, isReset)
	self.waitFor(t, "the reset on the publishing instance", propagation, isReset)
}

func testWatchReturns(t *testing.T, c Catalog, _ Open) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		var once sync.Once
		done <- c.Watch(ctx, func(sluice.Event) { once.Do(func() { close(started) }) })
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch returned %v after its context ended; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
	waitGoroutines(t, before)
}

// waitGoroutines fails t unless the goroutine count drops back to at most
// want within a few seconds: what a Watch started must end with it.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines remain, %d before Watch; leaked:\n%s", n, want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testWatchReturnsOnClose checks that closing an instance ends its running
// Watch calls (a service shutting down must not hang on them) and whatever
// they started.
func testWatchReturnsOnClose(t *testing.T, _ Catalog, open Open) {
	inst := open(t)
	before := runtime.NumGoroutine()
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		var once sync.Once
		done <- inst.Watch(context.Background(), func(sluice.Event) { once.Do(func() { close(started) }) })
	}()
	<-started
	if err := inst.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch returned %v after Close; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after Close")
	}
	waitGoroutines(t, before)
}

// race runs call from n goroutines on each instance at once and returns
// their errors, indexed by call.
func race(insts []sluice.Catalog, n int, call func(c sluice.Catalog, i int) error) []error {
	errs := make([]error, len(insts)*n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range errs {
		c := insts[i%len(insts)]
		wg.Go(func() {
			<-start
			errs[i] = call(c, i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// exactlyOne checks that one call succeeded and every other failed with
// ErrConflict (never a raw driver error such as SQLITE_BUSY or a unique
// violation), and returns the winner.
func exactlyOne(t *testing.T, what string, errs []error) int {
	t.Helper()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if won >= 0 {
				t.Fatalf("%s: calls %d and %d both succeeded", what, won, i)
			}
			won = i
		case errors.Is(err, sluice.ErrConflict):
		default:
			t.Fatalf("%s: call %d failed with %v; want success or ErrConflict", what, i, err)
		}
	}
	if won < 0 {
		t.Fatalf("%s: no call succeeded", what)
	}
	return won
}

// testConcurrentWriters races writers on two instances sharing the database,
// as two service instances do: of calls taking the same name or route
// exactly one wins and the others get ErrConflict; failed calls change
// nothing, so the version moves once per success.
func testConcurrentWriters(t *testing.T, c Catalog, open Open) {
	ctx := t.Context()
	insts := []sluice.Catalog{c, open(t)}
	const each = 4
	v0 := version(t, c)
	exactlyOne(t, "CreateTenant of one name", race(insts, each, func(c sluice.Catalog, _ int) error {
		_, err := c.CreateTenant(ctx, "acme")
		return err
	}))
	exactlyOne(t, "CreateKey of one name", race(insts, each, func(c sluice.Catalog, _ int) error {
		_, hash := sluice.NewAPIKeySecret()
		_, err := c.CreateKey(ctx, "acme", "ci", sluice.RoleCheck, hash)
		return err
	}))
	exactlyOne(t, "PutRule of one route under different names", race(insts, each, func(c sluice.Catalog, i int) error {
		_, err := c.PutRule(ctx, rule("acme", fmt.Sprintf("r%d", i), "/same"))
		return err
	}))
	if got, want := version(t, c), v0+3; got != want {
		t.Fatalf("version %d after three winning changes from %d; failed calls must not move it", got, v0)
	}
	if keys := must(c.Keys(ctx, "acme"))(t); len(keys) != 1 {
		t.Fatalf("Keys = %+v; want the one that won", keys)
	}
	if rules := must(c.Rules(ctx, "acme"))(t); len(rules) != 1 || rules[0].Route != "/same" {
		t.Fatalf("Rules = %+v; want the one that won", rules)
	}

	// Replacing one rule from everywhere at once: every call succeeds and the
	// rule ends up whole, one writer's limits and not a mix.
	errs := race(insts, each, func(c sluice.Catalog, i int) error {
		_, err := c.PutRule(ctx, rule("acme", "shared", "/shared",
			sluice.TokenBucket(int64(i+1), 1).Named("a"), sluice.TokenBucket(int64(i+1), 1).Named("b")))
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent replace %d: %v", i, err)
		}
	}
	got := must(c.Rule(ctx, "acme", "shared"))(t)
	if len(got.Limits) != 2 || got.Limits[0].Capacity != got.Limits[1].Capacity {
		t.Fatalf("concurrent replaces left a mixed rule: %+v", got.Limits)
	}

	// Writes that do not collide all succeed.
	errs = race(insts, each, func(c sluice.Catalog, i int) error {
		_, err := c.CreateTenant(ctx, fmt.Sprintf("t%d", i))
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("CreateTenant t%d: %v", i, err)
		}
	}
	if n := len(must(c.Tenants(ctx))(t)); n != 1+len(errs) {
		t.Fatalf("%d tenants; want %d", n, 1+len(errs))
	}
}

// testTenantCaps races creates on three instances sharing the database, each
// enforcing the same caps: exactly the cap's number succeed, every other
// fails with ErrTenantCap (never a raw driver error), and replacing a rule
// or revoking a key is never refused.
func testTenantCaps(t *testing.T, c Catalog, open Open) {
	ctx := t.Context()
	const maxRules, maxKeys = 3, 2
	insts := []sluice.Catalog{c, open(t), open(t)}
	for _, inst := range insts {
		inst.(Catalog).SetTenantCaps(sluice.TenantCaps{Rules: maxRules, Keys: maxKeys})
	}
	must(c.CreateTenant(ctx, "acme"))(t)
	must(c.CreateTenant(ctx, "other"))(t)
	capped := func(what string, errs []error, want int) {
		t.Helper()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, sluice.ErrTenantCap):
				var ce *sluice.TenantCapError
				if !errors.As(err, &ce) || ce.Tenant != "acme" || ce.Cap != want || ce.Have != want {
					t.Fatalf("%s: call %d: %v; want a TenantCapError of acme at %d", what, i, err, want)
				}
			default:
				t.Fatalf("%s: call %d failed with %v; want success or ErrTenantCap", what, i, err)
			}
		}
		if won != want {
			t.Fatalf("%s: %d creates succeeded; want exactly the cap, %d", what, won, want)
		}
	}
	const each = 4
	capped("PutRule of distinct rules", race(insts, each, func(c sluice.Catalog, i int) error {
		_, err := c.PutRule(ctx, rule("acme", fmt.Sprintf("r%d", i), fmt.Sprintf("/r%d", i)))
		return err
	}), maxRules)
	capped("CreateKey of distinct names", race(insts, each, func(c sluice.Catalog, i int) error {
		_, hash := sluice.NewAPIKeySecret()
		_, err := c.CreateKey(ctx, "acme", fmt.Sprintf("k%d", i), sluice.RoleCheck, hash)
		return err
	}), maxKeys)
	rules := must(c.Rules(ctx, "acme"))(t)
	keys := must(c.Keys(ctx, "acme"))(t)
	if len(rules) != maxRules || len(keys) != maxKeys {
		t.Fatalf("%d rules and %d keys after the races; want exactly %d and %d", len(rules), len(keys), maxRules, maxKeys)
	}

	// At the cap: replacing is not creating, another tenant has its own
	// caps, and a revoked key no longer counts.
	replaced := rules[0]
	replaced.Route = "/replaced"
	must(c.PutRule(ctx, replaced))(t)
	must(c.PutRule(ctx, rule("other", "r", "/r")))(t)
	must(c.RevokeKey(ctx, "acme", keys[0].ID))(t)
	_, hash := sluice.NewAPIKeySecret()
	must(c.CreateKey(ctx, "acme", "after-revoke", sluice.RoleCheck, hash))(t)

	// A negative cap is no cap.
	c.SetTenantCaps(sluice.TenantCaps{Rules: -1, Keys: -1})
	must(c.PutRule(ctx, rule("acme", "uncapped", "/uncapped")))(t)
}

// testAdminTokenIfAbsent: instances starting at once on a fresh database
// each generate an operator token; exactly one may be stored, or the token
// printed by the others would not work.
func testAdminTokenIfAbsent(t *testing.T, c Catalog, open Open) {
	ctx := t.Context()
	_, err := c.SetAdminTokenHashIfAbsent(ctx, []byte("short"))
	wantErr(t, "SetAdminTokenHashIfAbsent with a malformed hash", err, sluice.ErrInvalid)
	_, err = c.AdminTokenHash(ctx)
	wantErr(t, "AdminTokenHash after a malformed one was refused", err, sluice.ErrNotFound)

	insts := []sluice.Catalog{c, open(t)}
	const each = 4
	hashes := make([][]byte, len(insts)*each)
	stored := make([]bool, len(hashes))
	for i := range hashes {
		hashes[i] = sluice.HashAPIKey(fmt.Sprintf("token-%d", i))
	}
	errs := race(insts, each, func(c sluice.Catalog, i int) error {
		var err error
		stored[i], err = c.SetAdminTokenHashIfAbsent(ctx, hashes[i])
		return err
	})
	won := -1
	for i, err := range errs {
		if err != nil {
			t.Fatalf("SetAdminTokenHashIfAbsent %d: %v", i, err)
		}
		if stored[i] {
			if won >= 0 {
				t.Fatalf("calls %d and %d both report they stored their hash", won, i)
			}
			won = i
		}
	}
	if won < 0 {
		t.Fatal("no call stored its hash")
	}
	if got := must(c.AdminTokenHash(ctx))(t); !bytes.Equal(got, hashes[won]) {
		t.Fatalf("AdminTokenHash = %x; want the winner's %x", got, hashes[won])
	}

	v := version(t, c)
	if ok := must(c.SetAdminTokenHashIfAbsent(ctx, sluice.HashAPIKey("later")))(t); ok {
		t.Fatal("SetAdminTokenHashIfAbsent stored over an existing hash")
	}
	if got := version(t, c); got != v {
		t.Fatalf("a hash not stored moved the version from %d to %d", v, got)
	}
	if got := must(c.Snapshot(ctx))(t).AdminTokenHash; !bytes.Equal(got, hashes[won]) {
		t.Fatalf("snapshot AdminTokenHash = %x; want %x", got, hashes[won])
	}
	// An explicit token (--admin-token) still replaces it.
	if err := c.SetAdminTokenHash(ctx, sluice.HashAPIKey("explicit")); err != nil {
		t.Fatal(err)
	}
	if got := must(c.AdminTokenHash(ctx))(t); !bytes.Equal(got, sluice.HashAPIKey("explicit")) {
		t.Fatalf("SetAdminTokenHash after IfAbsent did not replace: %x", got)
	}
}

// testListOrder: lists are sorted by the bytes of their names, the same on
// every database whatever its collation (a collation that skips '-', like
// glibc's en_US, would put "ab" before "a-c").
func testListOrder(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	names := []string{"ab", "a-c", "b", "a0", "a-b", "ac", "a"}
	want := slices.Sorted(slices.Values(names))
	for _, n := range names {
		must(c.CreateTenant(ctx, n))(t)
	}
	for _, n := range names {
		must(c.PutRule(ctx, rule("a", n, "/"+n)))(t)
	}
	if got := tenantNames(must(c.Tenants(ctx))(t)); !slices.Equal(got, want) {
		t.Fatalf("Tenants = %v; want %v", got, want)
	}
	var got []string
	for _, r := range must(c.Rules(ctx, "a"))(t) {
		got = append(got, r.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Rules = %v; want %v", got, want)
	}
	var ids []string
	for _, n := range names {
		_, hash := sluice.NewAPIKeySecret()
		ids = append(ids, must(c.CreateKey(ctx, "a", n, sluice.RoleCheck, hash))(t).ID)
	}
	var gotIDs []string
	for _, k := range must(c.Keys(ctx, "a"))(t) {
		gotIDs = append(gotIDs, k.ID)
	}
	if !slices.Equal(gotIDs, ids) {
		t.Fatalf("Keys = %v; want creation order %v", gotIDs, ids)
	}
}

func testMigrate(t *testing.T, c Catalog, open Open) {
	ctx := t.Context()
	if err := c.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	must(c.CreateTenant(ctx, "acme"))(t)
	if err := c.Migrate(ctx); err != nil {
		t.Fatalf("Migrate on a used catalog: %v", err)
	}
	if _, err := c.Tenant(ctx, "acme"); err != nil {
		t.Fatalf("Migrate lost data: %v", err)
	}
}

// testConcurrentMigrate checks that instances migrating one fresh database
// at once all succeed and leave a working schema.
func testConcurrentMigrate(t *testing.T, open Open) {
	const instances = 4
	cats := make([]Catalog, instances)
	for i := range cats {
		cats[i] = open(t)
	}
	errs := make(chan error, instances)
	start := make(chan struct{})
	for _, c := range cats {
		go func() {
			<-start
			errs <- c.Migrate(t.Context())
		}()
	}
	close(start)
	for range cats {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	must(cats[0].CreateTenant(t.Context(), "acme"))(t)
	if got := must(cats[instances-1].Tenant(t.Context(), "acme"))(t); got.Name != "acme" {
		t.Fatalf("Tenant = %+v", got)
	}
}

// testCheckWritable: the write probe passes on a writable database and
// changes nothing, not even the version.
func testCheckWritable(t *testing.T, c Catalog, _ Open) {
	before := version(t, c)
	if err := c.CheckWritable(t.Context()); err != nil {
		t.Fatalf("CheckWritable: %v", err)
	}
	if after := version(t, c); after != before {
		t.Errorf("the probe moved the version from %d to %d", before, after)
	}
}
