package check_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/memory"
)

// resetCatalog is a catalog of one tenant with one rule that records what
// it is told of resets, or fails to be told.
type resetCatalog struct {
	sluice.Catalog
	tenant    sluice.Tenant
	rule      sluice.Rule
	published []string
	recorded  []string
	failWith  error
	// failRecord fails the audit entry.
	failRecord error
}

func (c *resetCatalog) RecordReset(_ context.Context, tenant, rule, subject string) error {
	if c.failRecord != nil {
		return c.failRecord
	}
	c.recorded = append(c.recorded, tenant+"/"+rule+"/"+subject)
	return nil
}

func (c *resetCatalog) Tenant(_ context.Context, name string) (sluice.Tenant, error) {
	if name != c.tenant.Name {
		return sluice.Tenant{}, sluice.ErrNotFound
	}
	return c.tenant, nil
}

func (c *resetCatalog) Rule(_ context.Context, tenant, name string) (sluice.Rule, error) {
	if tenant != c.tenant.Name || name != c.rule.Name {
		return sluice.Rule{}, sluice.ErrNotFound
	}
	return c.rule, nil
}

func (c *resetCatalog) PublishReset(_ context.Context, tenant, rule, subject string) error {
	if c.failWith != nil {
		return c.failWith
	}
	c.published = append(c.published, tenant+"/"+rule+"/"+subject)
	return nil
}

func TestResetSubject(t *testing.T) {
	ctx := context.Background()
	store := memory.New(memory.Options{})
	defer store.Close()
	engine := check.New(store, check.Options{})
	defer engine.Close()
	cat := &resetCatalog{
		tenant: sluice.Tenant{Name: "acme", Generation: 1, CreatedAt: time.Now()},
		rule:   sluice.Rule{Tenant: "acme", Name: "api", Route: "*", Limits: []sluice.Limit{sluice.TokenBucket(1, 1.0/3600)}},
	}
	rule := &check.Rule{Namespace: cat.tenant.CounterNamespace(), Name: "api", Limits: cat.rule.Limits, Mode: sluice.FailClosed}
	allowed := func() bool {
		t.Helper()
		res, err := engine.Check(ctx, check.Query{Rule: rule, Subject: "u", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Decision.Allowed
	}

	t.Run("forgets_the_counters_then_tells_the_instances", func(t *testing.T) {
		if !allowed() || allowed() {
			t.Fatal("want the first check allowed and the second denied")
		}
		if err := engine.ResetSubject(ctx, cat, "acme", "api", "u"); err != nil {
			t.Fatal(err)
		}
		if !allowed() {
			t.Fatal("denied after the reset: the counters (or the deny cache) were kept")
		}
		if len(cat.published) != 1 || cat.published[0] != "acme/api/u" {
			t.Fatalf("published %q, want the reset of acme/api/u", cat.published)
		}
		if len(cat.recorded) != 1 || cat.recorded[0] != "acme/api/u" {
			t.Fatalf("recorded %q, want the audit entry of acme/api/u", cat.recorded)
		}
	})
	t.Run("unrecorded_reset_resets_nothing", func(t *testing.T) {
		if allowed() {
			t.Fatal("the subject's one unit was free before this subtest")
		}
		refused := errors.New("catalog read-only")
		cat.failRecord = refused
		defer func() { cat.failRecord = nil }()
		if err := engine.ResetSubject(ctx, cat, "acme", "api", "u"); !errors.Is(err, refused) {
			t.Fatalf("error %v, want the catalog's refusal", err)
		}
		if allowed() {
			t.Fatal("a reset the audit log refused was made anyway")
		}
	})
	t.Run("unknown_rule_is_the_catalogs_error", func(t *testing.T) {
		if err := engine.ResetSubject(ctx, cat, "acme", "nope", "u"); !errors.Is(err, sluice.ErrNotFound) {
			t.Fatalf("error %v, want sluice.ErrNotFound", err)
		}
	})
	t.Run("failed_announcement_says_to_repeat", func(t *testing.T) {
		down := errors.New("catalog down")
		cat.failWith = down
		defer func() { cat.failWith = nil }()
		err := engine.ResetSubject(ctx, cat, "acme", "api", "u")
		if !errors.Is(err, check.ErrResetNotPublished) || !errors.Is(err, down) {
			t.Fatalf("error %v, want ErrResetNotPublished wrapping the catalog's error", err)
		}
		if !allowed() {
			t.Fatal("the counters must be reset even when the announcement fails")
		}
	})
}
